"""Issue 23 item 9: the prompt estimate is calibrated from the provider's own counts, so a prompt never exceeds
the window; a compaction summary cut short is said and asked for again."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from pathlib import Path

from prime_ci.loop.agent import Agent, Conversation
from prime_ci.loop.budget import Budget, Limits
from prime_ci.loop.compact import CUT_SHORT, Compactor
from prime_ci.model.protocol import ModelReply
from prime_ci.model.usage import MARGIN, PRIOR_TOKENS_PER_CHAR, TokenRate, Usage
from prime_ci.session.log import SessionLog, read_session
from prime_ci.stops import Stop, StopReason
from prime_ci.testing.fakes import FakeExecutor, ModelCall, ScriptedModel, cell, text_reply, tool_reply

WINDOW = 8192
CHARS_PER_TOKEN = 2.56  # Gemma 3 270M on its own output


def test_the_rate_is_the_prior_until_a_count_then_the_highest_count_with_a_margin() -> None:
    rate = TokenRate()
    assert rate.tokens(1000) == math.ceil(1000 * PRIOR_TOKENS_PER_CHAR)
    rate.observe(10_000, 2500)
    rate.observe(10_000, 3906)
    rate.observe(10_000, 3000)  # a lower ratio later does not lower the estimate
    assert rate.per_char == 0.3906 * MARGIN
    assert all(rate.tokens(rate.chars(t)) <= t for t in range(1, 3000))  # what fits t tokens, at this rate
    rate.observe(100, 110_000)  # not a rate a tokenizer has: a scripted or misreported count
    rate.observe(100, 0)
    assert rate.per_char == 0.3906 * MARGIN


async def _completed() -> Stop | str:
    return Stop(StopReason.COMPLETED, "turn ended")


class SmallWindowServer:
    """A provider counting 2.56 characters a token over the request's JSON, with an 8,192-token window:
    it records every request whose prompt plus completion allowance would not fit (llama.cpp cuts the
    answer at the window's edge then)."""

    def __init__(self, turns: int, summaries: list[str] | None = None, cut_short: int = 0) -> None:
        self.turns = itertools.count()
        self.last_turn = turns
        self.cut_short = cut_short  # the first this many summaries stop at their token limit
        self.over: list[tuple[int, int]] = []
        self.summaries: list[ModelCall] = []
        self.model = ScriptedModel(self.answer)

    def answer(self, call: ModelCall) -> ModelReply:
        prompt = math.ceil((len(json.dumps(call.messages)) + len(json.dumps(call.tools))) / CHARS_PER_TOKEN)
        if prompt + call.max_tokens > WINDOW:
            self.over.append((prompt, call.max_tokens))
        if not call.tools:
            self.summaries.append(call)
            cut = len(self.summaries) <= self.cut_short
            return ModelReply("## Goal\nkeep going", [], Usage(prompt, call.max_tokens if cut else 40), None,
                              "length" if cut else "stop", "scripted/model")
        turn = next(self.turns)
        reply = tool_reply(f"print('{turn}' * 3000)") if turn < self.last_turn else text_reply("done")
        reply.usage = Usage(prompt, 30)
        return reply


def agent_for(tmp_path: Path, server: SmallWindowServer) -> tuple[Agent, list[str]]:
    said: list[str] = []
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    budget = Budget(Limits())
    rate = budget.rate(server.model)
    agent = Agent(server.model, FakeExecutor(default=cell("7" * 3000)), budget, log, _completed, cell_timeout=60.0,
                  conversation=Conversation(rate=rate), progress=said.append)
    agent.conversation.add({"role": "system", "content": "system prompt " * 100})
    agent.give_task("the task")
    agent.compactor = Compactor(server.model, budget, log, WINDOW, rate=rate, progress=said.append)
    return agent, said


def test_no_request_exceeds_a_window_counted_at_2_56_characters_a_token(tmp_path: Path) -> None:
    server = SmallWindowServer(turns=24)
    agent, said = agent_for(tmp_path, server)
    assert asyncio.run(agent.run()).reason is StopReason.COMPLETED
    assert server.summaries, "the context should have been compacted"
    assert server.over == [], server.over
    assert not any("cut short" in line for line in said)


def session_entries(agent: Agent) -> list[dict[str, object]]:
    agent.log.close()
    return read_session(agent.log.path, strict=True).entries


def test_a_summary_cut_short_is_said_and_asked_again_over_half_the_transcript(tmp_path: Path) -> None:
    server = SmallWindowServer(turns=12, cut_short=1)
    agent, said = agent_for(tmp_path, server)
    assert asyncio.run(agent.run()).reason is StopReason.COMPLETED
    first, again = server.summaries[:2]
    assert len(json.dumps(again.messages)) < len(json.dumps(first.messages)) * 0.75
    assert [line for line in said if "cut short" in line] == [
        f"the compaction summary was cut short at {first.max_tokens} tokens (finish_reason=length, "
        f"{math.ceil((len(json.dumps(first.messages)) + 2) / CHARS_PER_TOKEN)} prompt tokens, window {WINDOW}): "
        "asking again over half the transcript"]
    entries = session_entries(agent)
    notes = [e for e in entries if e.get("customType") == "prime_ci.compaction_cut_short"]
    assert len(notes) == 1 and notes[0]["data"]["retried"] is True  # type: ignore[index]
    compaction = next(e for e in entries if e["type"] == "compaction")
    assert compaction["details"]["summaryCutShort"] is False and compaction["details"]["attempts"] == 2  # type: ignore[index]
    assert CUT_SHORT not in str(compaction["summary"])


def test_a_summary_cut_short_twice_is_kept_and_marked(tmp_path: Path) -> None:
    server = SmallWindowServer(turns=12, cut_short=2)
    agent, said = agent_for(tmp_path, server)
    assert asyncio.run(agent.run()).reason is StopReason.COMPLETED
    assert any(line.endswith("kept, marked as cut short") for line in said), said
    compaction = next(e for e in session_entries(agent) if e["type"] == "compaction")
    assert compaction["details"]["summaryCutShort"] is True  # type: ignore[index]
    assert CUT_SHORT in str(compaction["summary"])
    after = server.model.calls[server.model.calls.index(server.summaries[1]) + 1]
    assert CUT_SHORT in after.messages[1]["content"]  # the model is told too
