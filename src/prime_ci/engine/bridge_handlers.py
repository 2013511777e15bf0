"""What the kernels ask the root host over the bridge: the root kernel's ``gates``, ``goal``, ``compact``,
``history``, ``rlm`` and ``agent_message`` operations (and the harness's), and the children's hosts' own bridge,
where every request must carry a child's id and token."""

from __future__ import annotations

from typing import Any, Protocol

from prime_ci.children import auth
from prime_ci.children.family import Family
from prime_ci.engine.prepare import Prepared
from prime_ci.gates.judge import Judge
from prime_ci.kernel.bridge import Bridge, Handler, Refused
from prime_ci.loop.agent import Agent
from prime_ci.loop.budget import Budget
from prime_ci.session.log import SessionLog


class RunState(Protocol):
    """What the handlers read and change of the run (``engine.run.Run``)."""

    prep: Prepared
    budget: Budget
    log: SessionLog
    judge: Judge
    bridge: Bridge
    child_bridge: Bridge
    family: Family | None
    goal_done: str | None
    agent: Agent | None
    cells: list[dict[str, Any]]


def register(run: RunState) -> None:
    """Register every operation on the run's two bridges (the family must exist)."""

    async def gates_last(_: dict[str, Any]) -> Any:
        return run.judge.full_results()

    async def gates_run(req: dict[str, Any]) -> Any:
        name = req.get("name")
        if name is not None and name not in {s.name for s in run.prep.gates}:
            raise Refused(f"no gate named {name!r}")
        await run.judge.run_round(only=name)
        return run.judge.full_results()

    async def goal_get(_: dict[str, Any]) -> Any:
        return {"objective": run.prep.cfg.task_text(), "status": "complete" if run.goal_done else "active",
                "gates": [s.name for s in run.prep.gates], "usage": run.budget.usage(),
                "budgets": run.budget.limits_dict(), "wall_left_s": round(run.budget.wall_left(), 1)}

    async def goal_complete(req: dict[str, Any]) -> Any:
        run.goal_done = str(req.get("summary") or "")
        run.log.custom("prime_ci.goal", {"status": "complete", "summary": run.goal_done})
        if run.agent is not None:
            run.agent.end_turn_requested = True  # the cell's turn ends here and the gates decide
        return {"status": "complete", "note": "the turn ends after this cell; the gates decide success"}

    async def compact_run(req: dict[str, Any]) -> Any:
        assert run.agent is not None
        run.agent.compact_requested, run.agent.compact_focus = True, req.get("focus")
        return {"scheduled": True, "note": "the context is compacted before the next model call"}

    async def compact_status(_: dict[str, Any]) -> Any:
        assert run.agent is not None and run.agent.compactor is not None
        return {**run.agent.compactor.status(run.agent.conversation.tokens),
                "scheduled": run.agent.compact_requested}

    async def history(_: dict[str, Any]) -> Any:
        assert run.agent is not None
        return {"messages": run.agent.conversation.record, "cells": run.cells}

    assert run.family is not None
    fam = run.family
    handlers: dict[str, Handler] = {
        "compact.run": compact_run, "compact.status": compact_status, "history": history,
        "gates.last": gates_last, "gates.run": gates_run, "goal.get": goal_get, "goal.complete": goal_complete,
        "rlm.spawn": auth.as_root(fam.spawn), "rlm.list": auth.as_root(fam.list_children),
        "agent_message.send": auth.as_root(fam.send),
    }
    handlers.update(run.prep.harness.handlers(run.log))
    for op, fn in handlers.items():
        run.bridge.register(op, fn)
    # the children's hosts talk to the root on a bridge of their own, in a private directory the sandboxed
    # kernels cannot see: every request there must carry a child's id and token
    for op, fn in {"rlm.spawn": fam.spawn, "rlm.list": fam.list_children, "agent_message.send": fam.send,
                   "child.model": fam.model_call, "child.inbox": fam.inbox, "child.event": fam.event}.items():
        run.child_bridge.register(op, auth.as_child(fn))
