"""One rlm sub-agent process with its own kernel and session log (entered through ``prime_ci.child``).

It holds no provider key and never imports litellm: its model calls, messages and spawns go to the root host
over the root's bridge. It keeps no budget of its own: the root checks, meters and charges every model call
on the shared ledger and sends the ledger back with each answer, which is what this child's budget notes
and time limits are made from. Its own kernel talks to this process's bridge, which forwards the kernel API
to the root with this child's identity.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prime_ci.kernel import bridge
from prime_ci.kernel.api import PRELOAD
from prime_ci.kernel.client import Kernel
from prime_ci.kernel.launch import KernelConfig, Launched
from prime_ci.loop.agent import Agent, Stop, log_model
from prime_ci.loop.budget import BudgetExhausted, Snapshot
from prime_ci.loop.compact import Compactor
from prime_ci.loop.system_prompt import base_prompt, child_section
from prime_ci.model.protocol import Model, ModelReply
from prime_ci.model.usage import Usage
from prime_ci.session.log import SessionLog
from prime_ci.stops import StopReason

FORWARDED = ("rlm.spawn", "rlm.list", "agent_message.send")


class SharedLedger:
    """This child's view of the root's ledger (the ``Meter`` its loop takes): calls are made by the root.

    ``snapshot`` is the ledger as the root last reported it (at spawn, then with every answer), aged by the
    time since; the counters are this child's own spend, for its session's usage records.
    """

    def __init__(self, request: Callable[..., Awaitable[Any]], snapshot: dict[str, Any],
                 on_attributions: Callable[[list[dict[str, Any]]], None] = lambda _: None) -> None:
        self._request = request
        self._on_attributions = on_attributions
        self._seen(snapshot)
        self.warned: set[tuple[str, float]] = set()
        self.turns = 0
        self.spent = Usage()
        self.cost_usd: float | None = 0.0

    def _seen(self, data: dict[str, Any]) -> None:
        self.snapshot, self._at = Snapshot.from_json(data), time.monotonic()

    def now(self) -> Snapshot:
        return self.snapshot.aged(time.monotonic() - self._at)

    async def call(self, model: Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, turn: bool,
                   max_tokens: int | None = None, prompt_chars: int | None = None,
                   window: int | None = None) -> ModelReply:
        r = await self._request("child.model", messages=messages, tools=tools, max_tokens=max_tokens,
                                window=window)
        self._seen(r["budget"])
        self._on_attributions(r.get("attributions") or [])
        if "stop" in r:
            raise BudgetExhausted(StopReason(r["stop"]), str(r.get("detail") or "the shared budget ran out"))
        reply = ModelReply.from_wire(r)
        self.turns += 1
        self.spent += reply.usage
        cost = reply.cost_usd
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost
        return reply

    def exhausted(self, *, turn: bool = True) -> StopReason | None:
        return self.now().over(turn=turn)

    def wall_left(self) -> float:
        now = self.now()
        return now.max_wall_s - now.elapsed_s

    def warnings(self) -> list[str]:
        return self.now().notes(self.warned)

    def usage(self) -> dict[str, Any]:
        return {"turns": self.turns, "model_calls": self.turns, **self.spent.to_json(),
                "total_tokens": self.spent.total_tokens,
                "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6)}


class Host:
    def __init__(self, spec: dict[str, Any], session_dir: Path, kernel: Kernel, bridge_dir: Path) -> None:
        self.spec = spec
        self.session_dir = session_dir
        self.kernel = kernel
        self.bridge_dir = bridge_dir
        self.ident = {"child": spec["id"], "token": spec["token"]}
        self.name = str(spec["model"])
        self.queued: list[tuple[str, str, dict[str, Any]]] = []
        self.ledger = SharedLedger(self.root, spec["budget"], self.attribute)
        self.agent: Agent | None = None

    def attribute(self, records: list[dict[str, Any]]) -> None:
        """Usage of this child's own children, folded into its assistant entries (the root routes it here)."""
        if self.agent is None:
            return
        for record in records:
            self.agent.attribute(**record)

    async def root(self, op: str, **args: Any) -> Any:
        return await bridge.request(self.spec["root_bridge"], op, **self.ident, **args)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        """The child's ``Model``: a call made and metered by the root."""
        return await self.ledger.call(self, messages, tools, turn=True, max_tokens=max_tokens)

    def inbox(self) -> list[tuple[str, str, dict[str, Any]]]:
        items, self.queued = self.queued, []
        return items

    async def _compact_run(self, req: dict[str, Any]) -> Any:
        """The child kernel's ``compact.run()``: compact before its next model call, as the root's does."""
        if self.agent is None or self.agent.compactor is None:
            return {"scheduled": False, "note": "this sub-agent's context window is not known: nothing to compact by"}
        self.agent.compact_requested, self.agent.compact_focus = True, req.get("focus")
        return {"scheduled": True, "note": "the context is compacted before the next model call"}

    async def _compact_status(self, _: dict[str, Any]) -> Any:
        if self.agent is None or self.agent.compactor is None:
            return {"window": None, "scheduled": False}
        return {**self.agent.compactor.status(self.agent.conversation.tokens),
                "scheduled": self.agent.compact_requested}

    async def turn_end(self) -> Stop | str:
        await self.commit_branch()
        assert self.agent is not None
        await self.root("child.event", kind="turn_done", last_text=self.agent.last_text)
        while True:
            r = await self.root("child.inbox", wait=30)
            self.attribute(r.get("attributions") or [])
            if r.get("stop"):
                return Stop(StopReason.COMPLETED, "stopped by the root")
            if r["messages"]:
                self.queued.extend((m[0], m[1], m[2]) for m in r["messages"])
                return ""

    async def commit_branch(self) -> None:
        """In an isolated worktree, commit the child's work to its branch so the parent can merge it."""
        if not self.spec.get("branch"):
            return
        from prime_ci.isolation.worktree import IDENTITY, git

        cwd = Path(self.spec["cwd"])
        git_dir = Path(self.spec["git_dir"])

        def run(args: list[str]) -> subprocess.CompletedProcess[bytes]:
            return git(args, git_dir=git_dir, work_tree=cwd, cwd=cwd)

        await asyncio.to_thread(run, ["add", "-A"])
        status = await asyncio.to_thread(run, ["status", "--porcelain", "--ignore-submodules=dirty"])
        if status.stdout.strip():
            msg = f"rlm child {self.spec['name']}: work in progress"
            await asyncio.to_thread(run, [*IDENTITY, "commit", "--quiet", "--no-verify", "-m", msg])

    async def run(self) -> int:
        spec = self.spec
        session_dir = self.session_dir
        log = SessionLog.create(session_dir / "session.jsonl", cwd=spec.get("session_cwd") or spec["cwd"],
                                parent_session=spec["parent_session"], depth=spec["depth"])
        log_model(log, spec["model"])
        own = bridge.Bridge(self.bridge_dir)
        for op in FORWARDED:
            own.register(op, self._forwarder(op))
        own.register("goal.get", self._goal)
        own.register("compact.run", self._compact_run)
        own.register("compact.status", self._compact_status)
        await own.start(self.kernel.config.uid)
        kernel = self.kernel
        kernel.config.preload = PRELOAD
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        assert main is not None
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, main.cancel)
        stop = Stop(StopReason.INTERNAL_ERROR, "did not start")
        try:
            await self.root("child.event", kind="kernel", pid=kernel.pid, session_id=log.session_id)
            await kernel.start()
            self.agent = Agent(self, kernel, self.ledger, log, self.turn_end, float(spec["cell_timeout"]),
                               inbox=self.inbox)
            if spec.get("window"):  # the root's rule and ledger: its calls are made and metered by the root
                self.agent.compactor = Compactor(self, self.ledger, log, int(spec["window"]),
                                                 rate=self.agent.conversation.rate)
            self.agent.conversation.add({"role": "system",
                                         "content": base_prompt() + child_section(spec["name"], spec["depth"],
                                                                                  spec.get("role"))})
            # the task is the session's first user message (Prime Agent labels a session by it); where it came
            # from, in Prime Agent's agent-message terms, is host state beside it
            log.custom("prime_ci.task", {"id": f"spawn:{spec['id']}", "message": spec["task"],
                                         "from": spec.get("from", {}), "fromRelationship": "parent"})
            self.agent.give_task(f"[task from parent]\n\n{spec['task']}")
            self.agent.task = spec["task"]
            stop = await self.agent.run()
        except asyncio.CancelledError:
            stop = Stop(StopReason.INTERRUPTED, "stopped by the root")
        finally:
            # the record first: the root gives a stopping child little time before it signals it
            log.custom("prime_ci.stop", {"stop_reason": stop.reason, "exit_code": 0, "detail": stop.detail,
                                         "litellm_loaded": "litellm" in sys.modules})
            log.close()
            kernel.kill()
            await own.close()
        if stop.reason is not StopReason.INTERRUPTED:
            await self.commit_branch()
            last_text = self.agent.last_text if self.agent is not None else ""
            await self.root("child.event", kind="turn_done", last_text=last_text)
            await self.root("child.event", kind="stopped", reason=stop.reason)
        return 0

    def _forwarder(self, op: str) -> bridge.Handler:
        async def forward(req: dict[str, Any]) -> Any:
            if op == "rlm.spawn":  # the entry the child's usage is attributed to, whatever the kernel sent
                req = {**req, "parent_entry": self.agent.last_assistant if self.agent is not None else None}
            return await self.root(op, **req)

        return forward

    async def _goal(self, _: dict[str, Any]) -> Any:
        return {"objective": self.spec["task"], "status": "active", "role": "child", "name": self.spec["name"]}


def run(spec: dict[str, Any], session_dir: Path, config: KernelConfig, launched: Launched, bridge_dir: Path) -> int:
    return asyncio.run(Host(spec, session_dir, Kernel(config, launched), bridge_dir).run())
