"""rlm children, root side: spawning, the family registry, message routing, model calls, reaping.

Every child is a separate ``prime-ci child`` process with its own kernel and session log, but the root host
spawns all of them (whatever their depth), routes all their messages and makes all their model calls. So
one budget ledger covers the whole tree, no child ever holds a provider key or imports litellm, and one
process can reap everything at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.activity import doing
from prime_ci.children import messages
from prime_ci.children.auth import descends_from
from prime_ci.children.member import Member, Message, children_of
from prime_ci.children.token import FD_VAR, hand_over
from prime_ci.errors import ConfigError
from prime_ci.isolation import durable, spawn
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.sandbox import Sandbox
from prime_ci.isolation.worktree import GitError, Worktree
from prime_ci.kernel.bridge import PEER, Refused
from prime_ci.loop.agent import Agent
from prime_ci.loop.budget import Budget, BudgetExhausted
from prime_ci.model.protocol import Model
from prime_ci.model.providers import ReplayModel
from prime_ci.model.usage import session_usage
from prime_ci.session.log import SessionLog
from prime_ci.stops import StopReason

__all__ = ["Family", "Member"]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class Family:
    """The registry of the root and all its descendants."""

    root_log: SessionLog
    out: Path
    worktree: Worktree
    budget: Budget
    model: Model
    make_model: Callable[[str], Model]
    env: dict[str, str]
    bridge_path: str
    max_depth: int
    max_children: int
    child_turns: int
    cell_timeout: float
    say: Callable[[str], None]
    limits: Limits = field(kw_only=True)  # the run's: each child's kernels run in boxes with these
    sandbox: Sandbox | None = None
    subagent: Callable[[str], tuple[str, str | None] | None] | None = None
    session_cwd: str = ""  # the cwd of every session header of the run
    agent: Agent | None = None  # the root's loop, once it exists: the root's attributions go through it
    window: int | None = None  # the model's context window, once known: children compact by it like the root
    members: dict[str, Member] = field(default_factory=dict)
    monitors: list[asyncio.Task[None]] = field(default_factory=list)
    models: dict[str, Model] = field(default_factory=dict)
    member_models: dict[str, Model] = field(default_factory=dict)
    _git_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.members["root"] = Member("root", "root", None, 0, self.model.name, self.out,
                                      session_id=self.root_log.session_id)

    @property
    def root(self) -> Member:
        return self.members["root"]

    def sender(self, request: dict[str, Any]) -> Member:
        """Who is asking: a child's id and token (checked), from that child's host process when it has one (the
        children's bridge stamps the caller's pid), else the root (the root kernel's bridge refuses any identity:
        ``auth.as_root``)."""
        child = request.pop("child", None)
        token = request.pop("token", None)
        peer = request.pop(PEER, None)
        if child is None:
            return self.root
        member = self.members.get(str(child))
        if member is None or not secrets.compare_digest(member.token, str(token)):
            raise Refused("unknown child")
        if member.proc is not None and peer != member.proc.pid:
            raise Refused("unknown child")
        return member

    def children_of(self, member: Member) -> list[Member]:
        return children_of(self.members.values(), member)

    # -- spawning -------------------------------------------------------------------------------------
    async def spawn(self, request: dict[str, Any]) -> dict[str, Any]:
        parent = self.sender(request)
        task, name, model_name = str(request["task"]), request.get("name"), request.get("model")
        if parent.depth >= self.max_depth:
            raise Refused(f"rlm depth limit: an agent at depth {parent.depth} may not spawn (--max-depth "
                          f"{self.max_depth})")
        child_id = f"sub-{secrets.token_hex(4)}"
        name = str(name) if name is not None else f"{_slug(task)}-{child_id[4:8]}"
        if not NAME.fullmatch(name) or name in ("all", "root", "parent"):
            raise Refused(f"rlm name {name!r} is not allowed (letters, digits, . _ -; at most 64)")
        if any(m.name == name for m in self.children_of(parent)):
            raise Refused(f"rlm name {name!r} is already used by a sibling")
        alive = [m for m in self.children_of(parent) if m.status in ("running", "idle")]
        if len(alive) >= self.max_children:
            raise Refused(f"rlm fan-out limit: {len(alive)} children alive (--max-children {self.max_children})")
        role = self.subagent(name) if self.subagent is not None else None
        model = self._model_for(model_name if model_name is not None or role is None else role[1])
        if isinstance(model, ReplayModel) and model is self.model:  # a replayed run replays its children too
            try:
                model = model.for_child(name)
            except ConfigError as exc:
                raise Refused(f"rlm {name!r}: {exc}") from None
        session_dir = self.out / "children" / (name if not (self.out / "children" / name).exists() else child_id)
        session_dir.mkdir(parents=True)
        member = Member(child_id, name, parent.id, parent.depth + 1, model.name, session_dir,
                        token=secrets.token_hex(16))
        if parent.id == "root":
            member.spawned_from = self.agent.last_assistant if self.agent is not None else None
        else:  # set by the parent's host, not its kernel
            member.spawned_from = str(request.get("parent_entry") or "") or None
        cwd, git_dir = self.worktree.path, None
        if request.get("worktree") == "isolated":
            async with self._git_lock:  # concurrent `git worktree add` in one git dir race for its locks
                try:
                    cwd, member.branch, git_dir = await asyncio.to_thread(self._isolated_worktree, name, child_id)
                except GitError as exc:
                    raise Refused(f"rlm worktree for {name!r}: {exc}") from None
        parent_session = self.root_log.path if parent.id == "root" else parent.session_dir / "session.jsonl"
        spec = {"id": child_id, "name": name, "task": task, "depth": member.depth, "model": model.name,
                "cwd": str(cwd), "root_bridge": self.bridge_path,
                "parent_session": str(parent_session), "budget": self.ledger(member),
                "session_cwd": self.session_cwd or str(self.worktree.path),
                "from": {"sessionId": parent.session_id, "sessionName": parent.name, "activeSessionId": parent.id},
                "cell_timeout": self.cell_timeout, "branch": member.branch,
                "git_dir": str(git_dir) if git_dir else None,
                "scratch": str(self.worktree.root / "child-runs" / child_id),
                "sandbox": self.sandbox.to_json() if self.sandbox else None, "role": role[0] if role else None,
                "limits": self.limits.to_json(), "window": self.window}
        durable.write(session_dir / "spec.json", json.dumps(spec))
        pipe = hand_over(member.token)  # never in the environment: /proc/PID/environ keeps what exec got
        try:
            member.proc = await spawn.start([sys.executable, "-m", "prime_ci.child", str(session_dir / "spec.json")],
                                            env={**self.env, FD_VAR: str(pipe)}, out=session_dir / "child.log",
                                            pass_fds=(pipe,))
        finally:
            os.close(pipe)
        self.members[child_id] = member
        self.member_models[child_id] = model
        self.monitors.append(asyncio.create_task(self._monitor(member)))
        self.root_log.custom("prime_ci.child", {"event": "spawned", **member.handle(), "parent": parent.id,
                                                "depth": member.depth, "branch": member.branch})
        self.say(f"spawned child {name} ({child_id}) at depth {member.depth}")
        return member.handle()

    def _member_model(self, member: Member) -> Model:
        return self.member_models.get(member.id) or self._model_for(member.model)

    def _model_for(self, name: Any) -> Model:
        if name is None or name == self.model.name:
            return self.model
        if str(name) not in self.models:
            try:
                self.models[str(name)] = self.make_model(str(name))
            except Exception as exc:  # noqa: BLE001 - any model-construction error is the cell's to see
                raise Refused(f"rlm model {name!r}: {exc}") from None
        return self.models[str(name)]

    def _isolated_worktree(self, name: str, child_id: str) -> tuple[Path, str, Path]:
        """The child's checkout, its branch and its git dir (which the child host names explicitly: the
        checkout's ``.git`` file is the child's to rewrite)."""
        branch = f"rlm/{name}"
        path = self.worktree.root / "children" / child_id
        base = self.worktree.git(["rev-parse", "HEAD"]).stdout.decode().strip()
        self.worktree.git(["worktree", "add", "--quiet", "-b", branch, str(path), base])
        git_dir = self.worktree.git_dir / "worktrees" / path.name
        if not (git_dir / "HEAD").is_file():
            raise GitError(f"git worktree add made no {git_dir}")
        return path, branch, git_dir

    async def _monitor(self, member: Member) -> None:
        assert member.proc is not None
        code = await member.proc.wait()
        self._kill_kernel(member)
        if member.stopping or member.status == "completed":
            member.status = "completed"
            return
        member.status = "error"
        why = f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"
        self.root_log.custom("prime_ci.child", {"event": "failed", "id": member.id, "name": member.name, "why": why})
        self.say(f"child {member.name} failed: {why}")
        details = {"kind": "failure", "childId": member.id, "sessionName": member.name, "error": why}
        text = f"RLM child {member.name} ({member.id}) failed: {why}."
        self._notify_parent(member, "rlm_child_failure", text, details)

    # -- events from child hosts ----------------------------------------------------------------------
    async def event(self, request: dict[str, Any]) -> Any:
        member = self.sender(request)
        kind = request.get("kind")
        if kind == "kernel":
            pid = int(request["pid"])
            if member.proc is None or not descends_from(pid, member.proc.pid):
                raise Refused(f"process {pid} was not started by this child")
            member.kernel_pid = pid
            member.session_id = str(request.get("session_id") or "")
        elif kind == "turn_done":
            member.status = "idle"
            member.last_text = str(request.get("last_text") or "")
            if not member.replied:
                preview = " ".join(member.last_text.split())
                preview = preview[:157] + "..." if len(preview) > 160 else preview
                self._notify_parent(
                    member, "rlm_child_terminal_notice",
                    f"RLM child {member.name} ({member.id}) completed without sending a reply. "
                    f"Last assistant text: {preview or '(none)'}",
                    {"kind": "completed_without_reply", "childId": member.id, "sessionName": member.name,
                     "lastAssistantTextPreview": preview},
                )
            member.replied = False
        elif kind == "stopped":
            member.status = "completed"
            member.stopping = True
        return {"ok": True}

    def _notify_parent(self, member: Member, custom_type: str, text: str, details: dict[str, Any]) -> None:
        parent = self.members.get(member.parent or "")
        if parent is not None and parent.status != "error":
            self._enqueue(parent, (custom_type, text, details))

    # -- model calls for children ---------------------------------------------------------------------
    def ledger(self, member: Member) -> dict[str, Any]:
        """The shared ledger as ``member`` sees it (its own turn cap): what its budget notes are made from."""
        return self.budget.snapshot(turns=member.calls, max_turns=self.child_turns).to_json()

    async def model_call(self, request: dict[str, Any]) -> Any:
        """A child's model call, metered on the shared ledger; every answer carries the ledger."""
        member = self.sender(request)
        if member.calls >= self.child_turns:
            return {"stop": StopReason.MAX_TURNS.value, "detail": f"the child's {self.child_turns} turns are used",
                    "budget": self.ledger(member)}
        cap, window = request.get("max_tokens"), request.get("window")
        try:
            with doing(f"sub-agent {member.name}"):  # the status line: whose model call the run waits for
                reply = await self.budget.call(self._member_model(member), request["messages"], request["tools"],
                                               turn=False, max_tokens=int(cap) if cap is not None else None,
                                               window=int(window) if window is not None else None)
        except BudgetExhausted as exc:
            return {"stop": exc.reason.value, "detail": exc.detail, "budget": self.ledger(member)}
        member.calls += 1
        member.prompt_tokens += reply.usage.prompt_tokens
        member.completion_tokens += reply.usage.completion_tokens
        known = member.cost_usd is not None and reply.cost_usd is not None
        member.cost_usd = (member.cost_usd or 0.0) + (reply.cost_usd or 0.0) if known else None
        self._attribute(member, session_usage(reply.usage, reply.cost))
        return {**reply.to_wire(), "budget": self.ledger(member), "attributions": member.take_attributions()}

    def _attribute(self, member: Member, usage: dict[str, Any]) -> None:
        """One call's usage, for every ancestor's session: each folds it into its assistant entry that spawned
        the branch the call came from, so a grandchild's spend reaches the root's totals as Prime Agent sums them.
        The root's log is written here, a child's by its host (with its next answer from the root; an idle one is
        woken for it)."""
        caller = member
        while (parent := self.members.get(member.parent or "")) is not None and member.spawned_from is not None:
            record: dict[str, Any] = {"target": member.spawned_from, "child_usage": usage, "origin": member.origin,
                                      "childId": member.id, "childName": member.name}
            if caller is not member:
                record["descendantName"] = caller.name
            if parent.id == "root":
                if self.agent is not None:
                    self.agent.attribute(**record)
            elif parent.status != "error":
                parent.attributions.append(record)
                parent.arrived.set()
            member = parent

    # -- messages ---------------------------------------------------------------------------------------
    async def send(self, request: dict[str, Any]) -> Any:
        sender = self.sender(request)
        text = messages.checked_text(request.get("text"))
        target, relation = messages.resolve(self.members, sender, request.get("receiver_role"),
                                            request.get("receiver_name"))
        messages.admit(sender, target)
        message, receipt = messages.envelope(sender, target, relation, text)
        self._enqueue(target, message)
        if target.id == sender.parent:
            sender.replied = True
        return receipt

    def _enqueue(self, target: Member, message: Message) -> None:
        target.inbox.append(message)
        target.arrived.set()
        if target.id != "root" and target.status == "idle":
            target.status = "running"

    def drain(self, member: Member) -> list[Message]:
        items = list(member.inbox)
        member.inbox.clear()
        member.arrived.clear()
        if items:  # what the member's next calls answer, for their attribution (Prime Agent's "origin")
            member.origin = "agent_message" if any(m[0] == "agent_message" for m in items) else "direct_user"
        return items

    async def inbox(self, request: dict[str, Any]) -> Any:
        """Long poll from a child host: its pending messages, or ``stop`` when the run is ending."""
        member = self.sender(request)
        if not member.inbox and not member.stopping and not member.attributions:
            member.waiting = True
            try:
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(member.arrived.wait(), float(request.get("wait", 0)))
            finally:
                member.waiting = False
        attributions = member.take_attributions()
        if member.stopping:
            return {"stop": True, "messages": [], "attributions": attributions}
        messages = self.drain(member)
        if messages:
            member.status = "running"
        return {"messages": [list(m) for m in messages], "attributions": attributions}

    async def wait_for_children(self, timeout: float) -> None:
        """Root's join: until a message for the root arrives or no child is running."""
        root = self.root
        deadline = time.monotonic() + timeout
        root.waiting = True
        try:
            while not root.inbox and any(m.status == "running" for m in self.members.values() if m.parent):
                root.arrived.clear()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(root.arrived.wait(), min(1.0, remaining))
        finally:
            root.waiting = False

    def running(self) -> bool:
        return any(m.status == "running" for m in self.members.values() if m.parent)

    async def list_children(self, request: dict[str, Any]) -> Any:
        sender = self.sender(request)
        return [{**m.handle(), "status": m.status} for m in self.children_of(sender)]

    # -- teardown -------------------------------------------------------------------------------------
    async def stop_all(self, grace: float = 2.0) -> None:
        live = [m for m in self.members.values() if m.proc is not None and m.proc.returncode is None]
        for member in live:  # idle children are in a long poll: answering it with "stop" ends them cleanly
            member.stopping = True
            member.arrived.set()
        for sig in (None, signal.SIGTERM):
            if sig is not None:
                for member in live:
                    _signal_group(member.proc, sig)
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(m.proc.wait() for m in live if m.proc)), grace / 2)
        for member in live:
            _signal_group(member.proc, signal.SIGKILL)
            self._kill_kernel(member)
        for task in self.monitors:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(task, 2.0)

    def _kill_kernel(self, member: Member) -> None:
        if member.kernel_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(member.kernel_pid, signal.SIGKILL)

    def summary(self) -> list[dict[str, Any]]:
        return [{"name": m.name, "id": m.id, "status": m.status, "session": str(m.session_dir / "session.jsonl"),
                 "depth": m.depth, "model": m.model, "model_calls": m.calls,
                 "total_tokens": m.prompt_tokens + m.completion_tokens, "cost_usd": m.cost_usd, "branch": m.branch}
                for m in self.members.values() if m.parent]


def _signal_group(proc: asyncio.subprocess.Process | None, sig: int) -> None:
    if proc is not None and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())[:3]
    return "-".join(words)[:40] or "task"
