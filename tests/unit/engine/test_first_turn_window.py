"""Issue 40: no compaction before there is a conversation to compact. On a small window (llama.cpp's 2,048) the
first estimate of the system prompt and the task can pass the compaction threshold; the run says so in one line
and sends the task, instead of compacting a transcript that has no reply in it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prime_ci.loop.agent import Agent, Conversation
from prime_ci.loop.budget import Budget, Limits
from prime_ci.loop.compact import Compactor
from prime_ci.session.log import SessionLog
from prime_ci.stops import Stop, StopReason
from prime_ci.testing.fakes import FakeExecutor, ModelCall, ScriptedModel, cell, text_reply, tool_reply

WINDOW = 2048


async def _completed() -> Stop | str:
    return Stop(StopReason.COMPLETED, "done")


def test_the_first_request_is_the_task_not_a_compaction(tmp_path: Path) -> None:
    calls: list[ModelCall] = []

    def answer(call: ModelCall) -> object:
        calls.append(call)
        return tool_reply("print(1)") if len(calls) == 1 else text_reply("done")

    model = ScriptedModel(answer)  # type: ignore[arg-type]
    budget = Budget(Limits())
    rate = budget.rate(model)
    said: list[str] = []
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    agent = Agent(model, FakeExecutor(default=cell("1")), budget, log, _completed, cell_timeout=60.0,
                  conversation=Conversation(rate=rate), progress=said.append)
    agent.conversation.add({"role": "system", "content": "You are a careful engineer. " * 120})  # ~3.4k chars
    agent.give_task("Fix the failing test in calc.py.")
    agent.compactor = Compactor(model, budget, log, WINDOW, rate=rate, progress=said.append)
    assert agent.compactor.needed(agent.conversation.tokens), "the first estimate must be past the threshold here"
    assert asyncio.run(agent.run()).reason is StopReason.COMPLETED
    assert calls[0].tools, "the first call was a compaction, not the task"
    assert "Fix the failing test in calc.py." in str(calls[0].messages[-1])
    warned = [line for line in said if "nothing is compacted before the model's first reply" in line]
    assert len(warned) == 1 and f"{WINDOW}-token context window" in warned[0]
