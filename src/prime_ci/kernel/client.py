"""The model's only tool: a persistent IPython kernel, launched and supervised by the host.

The host launches ``ipykernel`` itself (IPC transport, connection file in the run dir, its own session so
the whole process group can be killed) and talks to it with jupyter_client's async client. A cell that
overruns its timeout is interrupted (``interrupt_request`` on the control channel, which also works inside a
PID namespace); if the kernel is still busy after a grace period, the process group is killed and the kernel
restarted, and the caller is told that state was lost. A kernel killed by a limit of its box (memory, file
size, CPU), or a cell that ran into its process limit, is reported as such and the kernel restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient

from prime_ci.durations import format_duration
from prime_ci.errors import KernelLost
from prime_ci.isolation.limits import Events, reason
from prime_ci.kernel.launch import KernelConfig as KernelConfig  # re-exported: the public home of the config
from prime_ci.kernel.launch import Launched, launch, stop
from prime_ci.kernel.output import CellOutput

SNAPSHOT_EVERY = 1.0  # seconds: with a fast model, snapshotting every cell would be most of a turn
MAX_MESSAGE = 64 * 1024 * 1024  # a bigger message from the kernel (its output cap was undone) drops the connection


@dataclass
class CellResult:
    """What one cell produced, bounded for the model."""

    text: str
    status: str  # "ok" | "error" | "timeout" | "kernel_lost"
    duration_s: float
    chars: int
    error: str | None = None
    restarted: bool = False
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Kernel:
    """One kernel process plus its client; restartable."""

    def __init__(self, config: KernelConfig, launched: Launched | None = None) -> None:
        """``launched``: a kernel process already started with ``kernel_launch.launch(config, 1)``."""
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = launched.proc if launched else None
        self.box = launched.box if launched else None
        self._seen = Events()  # the box's limit counters at the last look
        self.client: AsyncKernelClient | None = None
        self.restarts = 0
        self.cells_run = 0
        self._launched = launched
        self._generation = 1 if launched else 0
        self._snapshot_at = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def start(self, timeout: float = 60.0) -> None:
        launched, self._launched = self._launched, None
        if launched is None:
            self._generation += 1
            launched = launch(self.config, self._generation)
            self.proc, self.box, self._seen = launched.proc, launched.box, Events()
        client = AsyncKernelClient(connection_file=str(launched.connection_file), context=_context())
        client.load_connection_file()
        client.start_channels(stdin=False, hb=False)  # stdin is never allowed; death is seen on the process
        self.client = client
        try:
            await self._until_ready(client, time.monotonic() + timeout)
        except KernelLost as exc:
            self.kill()
            raise KernelLost(f"kernel did not start: {exc}", launched.log) from exc
        if self.config.preload:
            result = await self.execute(self.config.preload, timeout=timeout, silent=True)
            if result.status != "ok":
                raise KernelLost(f"kernel preload failed: {result.text[-2000:]}", launched.log)

    async def _until_ready(self, client: AsyncKernelClient, deadline: float) -> None:
        """Ask for kernel_info until its reply arrives on shell and its status on iopub (both connected).

        jupyter_client's ``wait_for_ready`` polls the heartbeat in 0.2 s sleeps and then waits for 0.2 s of
        iopub silence: 0.2-0.4 s of every kernel start, three times over when three children start at once.
        """
        while True:
            msg_id = client.kernel_info()
            replied = False
            step_end = min(deadline, time.monotonic() + 1.0)
            while (left := step_end - time.monotonic()) > 0:
                if not self.alive():
                    raise KernelLost(f"the kernel process exited ({_how(self.proc)})")
                try:
                    if not replied:
                        msg = await client.get_shell_msg(timeout=min(0.25, left))
                        replied = msg["parent_header"].get("msg_id") == msg_id
                        if replied:  # its status follows at once unless iopub missed it: then ask again soon
                            step_end = min(step_end, time.monotonic() + 0.25)
                    else:
                        msg = await client.get_iopub_msg(timeout=min(0.25, left))
                        if msg["parent_header"].get("msg_id") == msg_id:
                            return
                except queue.Empty:
                    continue
            if time.monotonic() >= deadline:
                raise KernelLost("no kernel_info reply before the start timeout")

    async def execute(self, code: str, *, timeout: float, silent: bool = False) -> CellResult:
        """Run one cell; never raises for errors in the cell, only when the kernel cannot be restarted."""
        cell = CellOutput(self.config.output_limit)
        restarted = self.client is None or not self.alive()
        if restarted:
            cell.note(f"[{await self._restart(self._with_limit('the kernel process had died'))}]\n")
        client = self.client
        assert client is not None
        started = time.monotonic()
        msg_id = client.execute(code, silent=silent, store_history=not silent, allow_stdin=False)
        if not silent:
            self.cells_run += 1
        error: str | None = None
        deadline = started + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return await self._overrun(msg_id, cell, started, timeout)
            try:
                msg = await client.get_iopub_msg(timeout=min(1.0, remaining))
            except queue.Empty:
                if not self.alive():
                    return await self._lost(cell, started, "the kernel process died")
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                break
            error = cell.collect(kind, content) or error
        cell.finish()
        await self._drain_shell(msg_id)
        note, forks = self._limit_hit()
        if note and forks:  # what the cell left running could still hold every process slot: start afresh
            cell.note(f"\n[{await self._restart(f'the cell hit a limit ({note})')}]")
            restarted = True
        elif note:
            cell.note(f"\n[a process of this cell was {note}]\n")
        due = time.monotonic() - self._snapshot_at >= SNAPSHOT_EVERY
        if not silent and not error and self.config.snapshot_dir is not None and due:
            self._snapshot()
        return CellResult(
            text=cell.out.text(),
            status="error" if error else "ok",
            duration_s=time.monotonic() - started,
            chars=cell.out.total,
            error=error,
            restarted=restarted,
            outputs=cell.outputs,
        )

    async def _drain_shell(self, msg_id: str) -> None:
        assert self.client is not None
        with contextlib.suppress(queue.Empty):
            while True:
                reply = await self.client.get_shell_msg(timeout=0.5)
                if reply["parent_header"].get("msg_id") == msg_id:
                    return

    def _snapshot(self) -> None:
        """Save user variables in the kernel; not awaited: it runs while the model thinks."""
        assert self.client is not None
        code = (f"import prime_ci.kernel.api.snapshot as _s\n_s.save(get_ipython().user_ns, "
                f"{str(self.config.snapshot_dir)!r}, set(get_ipython().user_ns_hidden))\ndel _s")
        self.client.execute(code, silent=True, store_history=False, allow_stdin=False)
        self._snapshot_at = time.monotonic()

    async def restore(self) -> str:
        if self.config.snapshot_dir is None:
            return "its variables were lost"
        code = (f"import json, prime_ci.kernel.api.snapshot as _s\nprint(json.dumps(_s.restore(get_ipython().user_ns, "
                f"{str(self.config.snapshot_dir)!r})))\ndel _s")
        result = await self.execute(code, timeout=60, silent=True)
        try:
            info = json.loads(result.text.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return f"restoring its variables failed: {result.text[-300:]}"
        restored = ", ".join(info["restored"]) or "none"
        lost = ", ".join(f"{f['name']} ({f['reason']})" for f in info["failed"]) or "none"
        return f"variables restored from the last snapshot: {restored}; not restored: {lost}"

    async def user_names(self) -> list[str]:
        """Names the model defined in the kernel (for the reminder after a compaction)."""
        code = ("import json as _j\n_h = get_ipython().user_ns_hidden\nprint(_j.dumps(sorted(n for n in "
                "get_ipython().user_ns if not n.startswith('_') and n not in _h)))\ndel _j, _h")
        result = await self.execute(code, timeout=30, silent=True)
        try:
            names: list[str] = json.loads(result.text.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return []
        return [n for n in names if n not in ("gates", "goal", "rlm", "agent_message", "harness", "refine",
                                              "compact", "history")]

    async def interrupt(self) -> None:
        if self.client is None:
            return
        msg = self.client.session.msg("interrupt_request", {})
        self.client.control_channel.send(msg)

    async def _overrun(self, msg_id: str, cell: CellOutput, started: float, timeout: float) -> CellResult:
        assert self.client is not None
        await self.interrupt()
        grace_end = time.monotonic() + self.config.interrupt_grace
        while time.monotonic() < grace_end:
            try:
                msg = await self.client.get_iopub_msg(timeout=max(0.05, grace_end - time.monotonic()))
            except queue.Empty:
                break
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                cell.note(f"\n[cell interrupted after {format_duration(timeout)} timeout; kernel state kept]")
                return CellResult(cell.out.text(), "timeout", time.monotonic() - started, cell.out.total, "timeout")
            cell.collect(msg["msg_type"], msg["content"])
        note = await self._restart(self._with_limit("cell ignored the interrupt"))
        cell.note(f"\n[cell exceeded its {format_duration(timeout)} timeout and ignored the interrupt: {note}]")
        return CellResult(cell.out.text(), "timeout", time.monotonic() - started, cell.out.total, "timeout", True)

    async def _lost(self, cell: CellOutput, started: float, why: str) -> CellResult:
        why = self._with_limit(why)
        cell.note(f"\n[{await self._restart(why)}]")
        return CellResult(cell.out.text(), "kernel_lost", time.monotonic() - started, cell.out.total, why, True)

    async def _restart(self, why: str) -> str:
        """Kill, start again, restore the snapshot; returns a note for the model. ``why`` already names the limit
        that was hit, if any (``_with_limit``: asked once, as a limit read from the exit status stays)."""
        if self.restarts >= self.config.max_restarts:
            self.kill()
            raise KernelLost(f"{why}; restart limit ({self.config.max_restarts}) reached")
        self.restarts += 1
        self.kill()
        await self.start()
        return f"{why}: the kernel was restarted ({self.restarts}/{self.config.max_restarts}); {await self.restore()}"

    def _limit_hit(self) -> tuple[str | None, bool]:
        """A limit of the kernel's box hit since the last look: one line, and whether it refused forks."""
        if self.box is None:
            return None, False
        before, self._seen = self._seen, self.box.events()
        returncode = self.proc.poll() if self.proc else None
        return reason(self.config.limits, before, self._seen, returncode), self._seen.pids_max > before.pids_max

    def _with_limit(self, why: str) -> str:
        note, _ = self._limit_hit()
        return f"{why} ({note})" if note else why

    def kill(self) -> None:
        """Kill the kernel and everything its cells left running."""
        if self.client is not None:
            self.client.stop_channels()
            self.client = None
        proc, self.proc = self.proc, None
        box, self.box = self.box, None
        if proc is not None:
            stop(proc, box)

    async def shutdown(self) -> None:
        if self.client is not None and self.alive():
            self.client.shutdown()
            assert self.proc is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self.proc.wait, 2.0)
        self.kill()


_CONTEXT: zmq.asyncio.Context | None = None


def _context() -> zmq.asyncio.Context:
    """One zmq context per process, whose sockets retry a connection every 10 ms, not the default 100 ms:
    the client connects before the kernel has bound its sockets."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = zmq.asyncio.Context()
        _CONTEXT.setsockopt(zmq.RECONNECT_IVL, 10)
        _CONTEXT.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    return _CONTEXT


def _how(proc: subprocess.Popen[bytes] | None) -> str:
    code = proc.returncode if proc is not None else None
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
    return f"exit {code}"
