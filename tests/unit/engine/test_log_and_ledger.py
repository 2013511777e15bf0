"""Two README promises checked in process, at the moment they matter:

* every session entry is flushed and fsynced before the next model call (a spy on fsync/fdatasync records
  how much of session.jsonl was durable; the scripted model checks it when it is called);
* children share the root's token budget through a reservation before every call: concurrent calls cannot
  together spend more than ``--max-tokens``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from prime_ci.children.family import Family, Member
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.isolation.worktree import Worktree
from prime_ci.loop.agent import Agent, Stop, StopReason
from prime_ci.loop.budget import Budget, Limits
from prime_ci.loop.compact import Compactor
from prime_ci.model.protocol import ModelReply
from prime_ci.session.log import SessionLog
from prime_ci.testing.fakes import FakeExecutor, ModelCall, ScriptedModel, cell, text_reply, tool_reply


class DurableSpy:
    """Wraps os.fsync/os.fdatasync: the size of each file (by inode) at its last sync."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.synced: dict[int, int] = {}
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))

    def _wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            real(fd)
            st = os.fstat(fd)
            self.synced[st.st_ino] = st.st_size

        return sync

    def unsynced_bytes(self, path: Path) -> int:
        st = path.stat()
        return st.st_size - self.synced.get(st.st_ino, 0)


def entry_ids(path: Path) -> set[str]:
    return {json.loads(line).get("id", "") for line in path.read_bytes().splitlines()}


async def _completed() -> Stop | str:
    return Stop(StopReason.COMPLETED)


def durable_agent(tmp_path: Path, spy: DurableSpy, replies: list[Any], **kw: Any) -> tuple[Agent, list[int]]:
    """An agent whose model checks, at every call, that session.jsonl is durable and holds every message."""
    path = tmp_path / "session.jsonl"
    log = SessionLog.create(path, cwd=str(tmp_path))
    checked: list[int] = []

    def on_call(call: ModelCall) -> None:
        assert spy.unsynced_bytes(path) == 0, f"model call {call.index}: session.jsonl has unsynced entries"
        on_disk = entry_ids(path)
        logged = [i for i in agent.conversation.ids if i is not None]
        assert set(logged) <= on_disk, f"model call {call.index}: messages in context but not on disk"
        checked.append(call.index)

    model = ScriptedModel(replies, on_call=on_call)
    agent = Agent(model, FakeExecutor(**kw), Budget(Limits()), log, _completed, cell_timeout=60.0)
    agent.conversation.add({"role": "system", "content": "system prompt"})
    agent.give_task("the task")
    return agent, checked


def test_the_session_log_is_durable_before_every_model_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = DurableSpy(monkeypatch)
    inbox = [[], [("prime_ci.child_message", "a message from a child", {"from": "sub-1"})], []]
    agent, checked = durable_agent(tmp_path, spy, [tool_reply("a = 1"), tool_reply("b = 2"), text_reply("done")],
                                   script=["one", "two"])
    agent.inbox = lambda: inbox.pop(0) if inbox else []
    assert asyncio.run(agent.run()).reason == "completed"
    assert checked == [0, 1, 2]
    tool_results = [m for m in agent.conversation.messages if m["role"] == "tool"]
    assert len(tool_results) == 2


def test_the_session_log_is_durable_before_a_compaction_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = DurableSpy(monkeypatch)
    turns = iter(range(100))

    def step(call: ModelCall) -> ModelReply:
        if not call.tools:
            return text_reply("SUMMARY")
        return tool_reply("print('x')") if next(turns) < 5 else text_reply("done")

    agent, checked = durable_agent(tmp_path, spy, [step] * 20, default=cell("o" * 3000))
    assert isinstance(agent.model, ScriptedModel)
    agent.compactor = Compactor(agent.model, agent.budget, agent.log, window=2500)
    assert asyncio.run(agent.run()).reason == "completed"
    assert any(not c.tools for c in agent.model.calls), "the context should have been compacted"
    assert checked == list(range(len(agent.model.calls)))


# --- one ledger for concurrent calls --------------------------------------------------------------------------

MAX_TOKENS = 3000


def greedy(release: asyncio.Event) -> Callable[[ModelCall], Coroutine[Any, Any, ModelReply]]:
    """A model step that waits until the test releases it, then spends everything it was allowed."""

    async def step(call: ModelCall) -> ModelReply:
        await release.wait()
        return text_reply("a very long answer", completion_tokens=10**6)

    return step


async def in_flight(model: ScriptedModel, tasks: list[asyncio.Task[Any]], n: int) -> None:
    """Until each of the ``n`` concurrent callers has reached the model or been refused (no timed sleep)."""
    async with asyncio.timeout(10):
        while len(model.calls) + sum(t.done() for t in tasks) < n:
            await asyncio.sleep(0)


def family(tmp_path: Path, model: ScriptedModel, budget: Budget) -> Family:
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    wt = Worktree(tmp_path, tmp_path / ".git", "0" * 40, tmp_path, str(tmp_path))
    fam = Family(log, tmp_path, wt, budget, model, lambda name: model, {}, str(tmp_path / "bridge.sock"),
                 1, 4, 10, 60.0, lambda text: None, limits=BoxLimits())
    for name in ("left", "right"):
        fam.members[name] = Member(name, name, "root", 1, model.name, tmp_path / name, token=f"token-{name}")
    return fam


def test_concurrent_children_cannot_together_exceed_max_tokens(tmp_path: Path) -> None:
    async def scenario() -> tuple[Budget, ScriptedModel, list[Any]]:
        release = asyncio.Event()
        model = ScriptedModel([greedy(release), greedy(release)])
        budget = Budget(Limits(max_tokens=MAX_TOKENS))
        fam = family(tmp_path, model, budget)
        messages = [{"role": "user", "content": "work on your part"}]
        tasks = [asyncio.create_task(fam.model_call({"child": name, "token": f"token-{name}", "messages": messages,
                                                     "tools": [], "max_tokens": 10**6}))
                 for name in ("left", "right")]
        await in_flight(model, tasks, 2)
        release.set()
        return budget, model, await asyncio.gather(*tasks)

    budget, model, answers = asyncio.run(scenario())
    assert budget.total_tokens <= MAX_TOKENS, (budget.usage(), [c.max_tokens for c in model.calls])
    assert budget.reserved == 0, "every reservation is released after its call"
    assert len(model.calls) == 1, answers
    assert sorted(str(a.get("stop")) for a in answers) == ["None", "max_tokens"], answers


def test_root_and_child_calls_in_flight_together_share_one_ledger(tmp_path: Path) -> None:
    async def scenario() -> tuple[Budget, ScriptedModel, Stop, Any]:
        release = asyncio.Event()
        model = ScriptedModel([greedy(release), greedy(release)])
        budget = Budget(Limits(max_tokens=MAX_TOKENS))
        fam = family(tmp_path, model, budget)
        root_log = SessionLog.create(tmp_path / "root" / "session.jsonl", cwd=str(tmp_path))
        agent = Agent(model, FakeExecutor(), budget, root_log, _completed, cell_timeout=60.0)
        agent.conversation.add({"role": "user", "content": "the task"})
        root = asyncio.create_task(agent.run())
        await in_flight(model, [root], 1)
        child = asyncio.create_task(fam.model_call({"child": "left", "token": "token-left", "tools": [],
                                                    "messages": [{"role": "user", "content": "x"}],
                                                    "max_tokens": 10**6}))
        await in_flight(model, [root, child], 2)
        release.set()
        return budget, model, await root, await child

    budget, model, stop, answer = asyncio.run(scenario())
    assert budget.total_tokens <= MAX_TOKENS, (budget.usage(), [c.max_tokens for c in model.calls])
    assert answer.get("stop") == "max_tokens" and len(model.calls) == 1 and stop.reason == "completed", answer
