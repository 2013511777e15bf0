"""Issue 26, live progress (engine side): what the run is doing and its budgets, sampled while a phase runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import wait_until_async
from prime_ci.activity import Activity, watch
from prime_ci.children.family import Family
from prime_ci.children.member import Member
from prime_ci.engine.progress import Status
from prime_ci.gates.runner import GateSpec, run_gate
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.isolation.worktree import Worktree
from prime_ci.loop.budget import Budget, Limits
from prime_ci.model.protocol import ModelReply
from prime_ci.session.log import SessionLog
from prime_ci.testing.fakes import ModelCall, ScriptedModel, text_reply


def test_a_compaction_call_is_named_inside_its_phase() -> None:
    from prime_ci.activity import doing

    async def main() -> None:
        activity = Activity()
        watch(activity)
        budget = Budget(Limits())
        inner = asyncio.Event()

        async def step(call: ModelCall) -> ModelReply:
            inner.set()
            await asyncio.Event().wait()  # until cancelled
            raise AssertionError("unreachable")

        async def compaction() -> None:
            with doing("compaction"):
                await budget.call(ScriptedModel([step]), [{"role": "user", "content": "x"}], [], turn=False)

        task = asyncio.create_task(compaction())
        await inner.wait()
        status = Status.of(budget, activity)
        assert status.phase == "compaction › model call" and status.turn == 0  # not a turn of the loop
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert activity.latest() is None

    asyncio.run(main())


def test_a_gate_process_is_its_phase_while_it_runs(tmp_path: Path) -> None:
    go = tmp_path / "go"
    spec = GateSpec(name="unit", command=f"while [ ! -e {go} ]; do sleep 0.02; done")

    async def main() -> None:
        activity = Activity()
        watch(activity)
        for kind in ("gate", "setup"):
            go.unlink(missing_ok=True)
            task = asyncio.create_task(run_gate(spec, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                                                log_dir=tmp_path / kind, limits=BoxLimits(), kind=kind))
            await wait_until_async(lambda: activity.latest() is not None, what="the gate's phase")
            phase = activity.latest()
            assert phase is not None and phase.label == f"{kind} unit"
            go.touch()
            assert (await task).passed
            assert activity.latest() is None

    asyncio.run(main())


def test_a_sub_agents_model_call_is_named_by_the_sub_agent(tmp_path: Path) -> None:
    async def main() -> None:
        activity = Activity()
        watch(activity)
        called, release = asyncio.Event(), asyncio.Event()

        async def held(call: ModelCall) -> ModelReply:
            called.set()
            await release.wait()
            return text_reply("done")

        model = ScriptedModel([held])
        log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
        wt = Worktree(tmp_path, tmp_path / ".git", "0" * 40, tmp_path, str(tmp_path))
        family = Family(log, tmp_path, wt, Budget(Limits()), model, lambda name: model, {},
                        str(tmp_path / "bridge.sock"), 1, 4, 10, 60.0, lambda text: None, limits=BoxLimits())
        family.members["fixer"] = Member("c1", "fixer", "root", 1, model.name, tmp_path / "c1", token="t")
        call = asyncio.create_task(family.model_call({"child": "fixer", "token": "t", "tools": [],
                                                      "messages": [{"role": "user", "content": "go"}]}))
        await called.wait()
        phase = activity.latest()
        assert phase is not None and phase.label == "sub-agent fixer › model call" and not phase.turn
        release.set()
        assert (await call)["text"] == "done"
        log.close()

    asyncio.run(main())


def test_an_unknown_price_is_cost_unknown_on_the_status_line_not_zero_dollars() -> None:
    from prime_ci.cli.status import heartbeat_text, live_text

    async def main() -> tuple[Status, Status]:
        budget = Budget(Limits(max_cost=1.0))
        await budget.call(ScriptedModel([text_reply("priced")], cost_usd=0.004), [{"role": "user", "content": "x"}],
                          [], turn=True)
        priced = Status.of(budget, Activity())
        await budget.call(ScriptedModel([text_reply("no price known")]), [{"role": "user", "content": "x"}], [],
                          turn=True)  # a model no price table knows: the reply has no cost
        return priced, Status.of(budget, Activity())

    priced, unpriced = asyncio.run(main())
    assert priced.cost_usd is not None and "$0.004/$1.00" in live_text(priced)
    assert unpriced.cost_usd is None
    for text in (live_text(unpriced), heartbeat_text(unpriced)):
        assert "cost unknown/$1.00" in text and "$0" not in text.split("cost unknown")[0], text


def test_the_root_waiting_for_its_sub_agents_at_a_turns_end_says_so_on_the_status_line() -> None:
    from types import SimpleNamespace
    from typing import Any, cast

    from prime_ci.cli.status import heartbeat_text, live_text
    from prime_ci.engine.run import Run

    seen: list[Status] = []

    class StillRunning:
        """The family at a turn's end: a child still running, so the root waits for it before the gates."""
        root = SimpleNamespace(inbox=[])

        def running(self) -> bool:
            return True

        async def wait_for_children(self, timeout: float) -> None:
            seen.append(Status.of(budget, activity))

    activity, budget, said = Activity(), Budget(Limits()), []
    run = Run(prep=cast(Any, None), say=said.append)
    run.budget, run.family = budget, cast(Any, StillRunning())

    async def main() -> object:
        watch(activity)
        return await run._turn_end()

    assert asyncio.run(main()) == "", "a child still running: the loop continues, no gate round"
    [status] = seen
    assert status.phase == "waiting for sub-agents"
    assert live_text(status).startswith("» waiting for sub-agents ")
    assert heartbeat_text(status).startswith("… waiting for sub-agents (")
    assert said == ["waiting for running children before the gates"]
