"""Issue 40: the first estimate is calibrated by the server's own count where it offers one. Against a server
answering like llama.cpp on a 2,048-token window, ``/apply-template`` then ``/tokenize`` count the system prompt and
the task before the first call: the first estimate is that count plus the rate's margin, under the compaction
threshold, and the first request gets the room the window has. Elsewhere the rate stays the measured one."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from prime_ci.engine.first_estimate import calibrate
from prime_ci.loop.agent import TOOL, Agent, Conversation
from prime_ci.loop.budget import Budget, Limits
from prime_ci.loop.compact import Compactor
from prime_ci.loop.system_prompt import base_prompt
from prime_ci.model.providers import OpenAICompatModel
from prime_ci.model.usage import MARGIN, PRIOR_TOKENS_PER_CHAR
from prime_ci.session.log import SessionLog
from prime_ci.stops import Stop, StopReason
from prime_ci.testing import ScriptedServer, ipython, reply
from prime_ci.testing.fakes import FakeExecutor, cell
from prime_ci.testing.llama_api import prompt_tokens

WINDOW = 2048
# the system prompt of a run on a small project (base prompt, environment, skills): ~3.4k characters, as in the
# issue's run against llama-server with Gemma 3 270M
SYSTEM = base_prompt() + "\n\n## The project's environment\n\n" + "- a line about the project's tools\n" * 52
TASK = "Make the failing test in test_calc.py pass."


def opening(rate_owner: Budget, model: OpenAICompatModel) -> Conversation:
    conversation = Conversation(rate=rate_owner.rate(model))
    conversation.add({"role": "system", "content": SYSTEM})
    conversation.add({"role": "user", "content": TASK})
    return conversation


async def _completed() -> Stop | str:
    return Stop(StopReason.COMPLETED, "done")


def test_the_server_count_calibrates_the_first_estimate_and_the_first_request_has_the_windows_room(
        tmp_path: Path) -> None:
    with ScriptedServer([ipython("print(1)"), reply("done")], strict=True, context_window=WINDOW) as srv:
        model = OpenAICompatModel("openai/scripted-model", srv.url)
        budget = Budget(Limits())
        conversation = opening(budget, model)
        prior = conversation.tokens
        found = asyncio.run(calibrate(model, conversation))
        said: list[str] = []
        log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
        agent = Agent(model, FakeExecutor(default=cell("1")), budget, log, _completed, cell_timeout=60.0,
                      conversation=conversation, progress=said.append)
        agent.compactor = Compactor(model, budget, log, WINDOW, rate=conversation.rate, progress=said.append)
        first_estimate, chars = conversation.tokens, conversation.chars
        assert asyncio.run(agent.run()).reason is StopReason.COMPLETED
        first = srv.chat_requests[0]
        kinds = [r.step_kind for r in srv.requests]
    true_count = prompt_tokens(first.body)  # what the server counts the first request's prompt as
    assert found is not None and found.exact and found.how == "/apply-template + /tokenize"
    assert found.tokens == true_count
    assert true_count <= first_estimate <= true_count * MARGIN + 1
    assert prior == math.ceil(chars * PRIOR_TOKENS_PER_CHAR) > 0.8 * WINDOW  # the prior: past the threshold
    assert first_estimate < 0.8 * WINDOW
    assert first.body["max_tokens"] == WINDOW - first_estimate  # the room the window has, not a sliver
    assert not any("near the" in line for line in said), said
    assert kinds[:3] == ["models", "apply-template", "tokenize"]


def test_an_older_llama_cpp_without_apply_template_still_tokenizes_the_prompts_text() -> None:
    with ScriptedServer(strict=True, apply_template=False) as srv:
        model = OpenAICompatModel("openai/scripted-model", srv.url)
        conversation = opening(Budget(Limits()), model)
        found = asyncio.run(calibrate(model, conversation))
    body = {"messages": conversation.messages, "tools": [TOOL]}
    assert found is not None and not found.exact and found.how == "/tokenize of the prompt's text"
    assert abs(found.prompt(conversation.chars) - prompt_tokens(body)) <= 2
    assert prompt_tokens(body) <= conversation.tokens <= prompt_tokens(body) * MARGIN + 2


def test_a_server_that_is_not_llama_cpp_is_not_asked_and_the_rate_stays_the_measured_one() -> None:
    with ScriptedServer(context_window=WINDOW) as srv:  # vLLM's /models: no llama.cpp to ask
        model = OpenAICompatModel("openai/scripted-model", srv.url)
        conversation = opening(Budget(Limits()), model)
        assert asyncio.run(calibrate(model, conversation)) is None
        paths = [r.path for r in srv.requests]
    assert conversation.rate.observed == 0 and paths == ["/v1/models"]


def test_a_rate_the_provider_already_counted_is_kept() -> None:
    with ScriptedServer(strict=True) as srv:
        model = OpenAICompatModel("openai/scripted-model", srv.url)
        conversation = opening(Budget(Limits()), model)
        conversation.rate.observe(1000, 300)
        assert asyncio.run(calibrate(model, conversation)) is None
        assert srv.requests == []
