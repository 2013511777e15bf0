"""Code preloaded into the model's kernel: the names the model uses to talk to the host.

Runs inside the kernel process: stdlib only (plus this package), never litellm, never provider keys.
Requests go to the host over the unix socket named by ``PRIME_CI_BRIDGE``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from prime_ci.kernel.api import outcap

# What the host runs in a new kernel to define the API names (this module imports only the stdlib).
PRELOAD = "import prime_ci.kernel.api as _pci\n_pci.install(get_ipython().user_ns)\ndel _pci\n"


class HostError(RuntimeError):
    """The host refused or failed a request."""


def call(op: str, **args: Any) -> Any:
    """Blocking request to the host; returns its result or raises HostError."""
    path = os.environ.get("PRIME_CI_BRIDGE")
    if not path:
        raise HostError("not running under prime-ci (PRIME_CI_BRIDGE is not set)")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    if not chunks:
        raise HostError(f"{op}: the host closed the connection without a reply")
    reply = json.loads(b"".join(chunks))
    if not reply.get("ok"):
        raise HostError(reply.get("error", "unknown error"))
    return reply.get("result")


async def acall(op: str, **args: Any) -> Any:
    return await asyncio.to_thread(call, op, **args)


@dataclass
class GateRun:
    """One gate's last result, with its full output."""

    name: str
    command: str
    passed: bool
    exit_code: int | None
    output: str
    duration_s: float
    flaky: bool = False
    timed_out: bool = False
    attempts: int = 1
    failures: list[dict[str, Any]] = field(default_factory=list)
    kind: str = "full"  # "fast": a rerun of just the previously failing tests

    def __repr__(self) -> str:
        state = "passed" if self.passed else "TIMED OUT" if self.timed_out else "FAILED"
        ended = "" if self.timed_out else f" exit={self.exit_code}"
        return f"<gate {self.name} {state}{ended} output={len(self.output)} chars>"


def _gate_runs(items: list[dict[str, Any]]) -> list[GateRun]:
    fields = GateRun.__dataclass_fields__
    return [GateRun(**{k: v for k, v in item.items() if k in fields}) for item in items]


class Gates:
    """``gates.last``: the last gate round (full outputs); ``await gates.run(name=None)``: run now."""

    @property
    def last(self) -> list[GateRun]:
        return _gate_runs(call("gates.last"))

    async def run(self, name: str | None = None) -> list[GateRun]:
        return _gate_runs(await acall("gates.run", name=name))

    def __repr__(self) -> str:
        return "<gates: .last (last round), await .run(name=None)>"


class Goal:
    """``await goal.get()``: the objective and progress; ``await goal.complete(summary)``: declare it done."""

    async def get(self) -> dict[str, Any]:
        result: dict[str, Any] = await acall("goal.get")
        return result

    async def complete(self, summary: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await acall("goal.complete", summary=summary)
        return result

    def __repr__(self) -> str:
        return "<goal: await .get(), await .complete(summary=None)>"


class Rlm:
    """``await rlm(task, name=None, model=None, worktree="shared")`` spawns a sub-agent in its own process.

    Returns at admission a handle dict (``rlm_child_id``, ``name``, ``session_dir``, ``model``), never the
    answer: the child replies with ``agent_message.send(..., receiver_role="parent")``, which reaches you as
    a message. ``worktree="isolated"`` gives the child its own git worktree on branch ``rlm/<name>``.
    """

    async def __call__(
        self, task: str, name: str | None = None, model: str | None = None, worktree: str = "shared"
    ) -> dict[str, Any]:
        if not isinstance(task, str) or not task.strip():
            raise ValueError("rlm(): task must be a non-empty string")
        if worktree not in ("shared", "isolated"):
            raise ValueError('rlm(): worktree must be "shared" or "isolated"')
        result: dict[str, Any] = await acall("rlm.spawn", task=task, name=name, model=model, worktree=worktree)
        return result

    async def list_subagents(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await acall("rlm.list")
        return result

    def __repr__(self) -> str:
        return "<rlm: await rlm(task, name=None, model=None, worktree='shared'), await rlm.list_subagents()>"


class AgentMessage:
    """``await agent_message.send(text, receiver_role="parent"|"child"|"sibling", receiver_name=None)``.

    Returns Prime Agent's receipt: ``id``, ``message``, ``from`` and ``target`` (endpoints: ``activeSessionId``,
    ``sessionId``, ``sessionName``), ``deliveryStatus`` (``delivered``/``queued``) and its time."""

    async def send(self, text: str, receiver_role: str = "parent", receiver_name: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await acall(
            "agent_message.send", text=text, receiver_role=receiver_role, receiver_name=receiver_name
        )
        return result

    def __repr__(self) -> str:
        return "<agent_message: await .send(text, receiver_role='parent', receiver_name=None)>"


class Harness:
    """The continual harness: ``await harness.list(kind=None)``, ``read(kind, name)``,
    ``create(kind, name, content, description=None)``, ``update(...)``, ``delete(kind, name)``.

    Kinds: ``prompt`` (notes added to the system prompt), ``memory`` (durable facts), ``skill``, ``subagent``
    (role prompt and model for an ``rlm`` child of that name). Every change is a change set with an id.
    """

    async def list(self, kind: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await acall("harness.list", kind=kind)
        return result

    async def read(self, kind: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await acall("harness.read", kind=kind, name=name)
        return result

    async def create(self, kind: str, name: str, content: str, description: str | None = None,
                     model: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await acall("harness.create", kind=kind, name=name, content=content,
                                             description=description, model=model)
        return result

    async def update(self, kind: str, name: str, content: str, description: str | None = None,
                     model: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await acall("harness.update", kind=kind, name=name, content=content,
                                             description=description, model=model)
        return result

    async def delete(self, kind: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await acall("harness.delete", kind=kind, name=name)
        return result

    def __repr__(self) -> str:
        return "<harness: await .list(kind=None) .read(kind, name) .create(...) .update(...) .delete(kind, name)>"


class Refine:
    """``await refine.run(instructions=None)``: one refinement of the harness when this turn ends."""

    async def run(self, instructions: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await acall("refine.run", instructions=instructions)
        return result

    def __repr__(self) -> str:
        return "<refine: await .run(instructions=None)>"


class Compact:
    """``await compact.run(focus=None)``: compact the context before the next model call; ``compact.status()``."""

    async def run(self, focus: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await acall("compact.run", focus=focus)
        return result

    async def status(self) -> dict[str, Any]:
        result: dict[str, Any] = await acall("compact.status")
        return result

    def __repr__(self) -> str:
        return "<compact: await .run(focus=None), await .status()>"


class History:
    """Every message and cell of this session, compacted ones included (cell outputs kept up to 1 MB each).

    ``history.messages``, ``history.cells`` (dicts with ``code``, ``status``, ``output``), ``history.grep(text)``.
    """

    def _get(self) -> dict[str, Any]:
        result: dict[str, Any] = call("history")
        return result

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self._get()["messages"]
        return messages

    @property
    def cells(self) -> list[dict[str, Any]]:
        cells: list[dict[str, Any]] = self._get()["cells"]
        return cells

    def grep(self, text: str) -> list[str]:
        """Lines containing ``text`` across all messages and cell outputs."""
        data = self._get()
        blobs = [str(m.get("content") or "") for m in data["messages"]] + [c["output"] for c in data["cells"]]
        return [line for blob in blobs for line in blob.splitlines() if text in line]

    def __len__(self) -> int:
        return len(self._get()["messages"])

    def __repr__(self) -> str:
        data = self._get()
        return f"<history: {len(data['messages'])} messages, {len(data['cells'])} cells; .messages .cells .grep()>"


def install(namespace: dict[str, Any]) -> None:
    """Define the API names in the kernel's user namespace."""
    namespace.update(gates=Gates(), goal=Goal(), rlm=Rlm(), agent_message=AgentMessage(), compact=Compact(),
                     history=History(), harness=Harness(), refine=Refine())
    if "get_ipython" in namespace:
        outcap.install(namespace["get_ipython"]())
    project_site = os.environ.get("PRIME_CI_PROJECT_SITE")
    if project_site:  # the project's packages, after the kernel's own (same Python version only)
        import site

        site.addsitedir(project_site)
