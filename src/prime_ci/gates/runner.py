"""Quality gates: specs from TOML or ``--gate``, execution in their own process group, feedback, fingerprints.

A gate is hostile code from the worktree. It runs in a new session with exactly the environment it is
given plus a per-attempt marker variable, in a box of its own (``box.Box``: processes, memory, file size);
whatever it leaves behind (its process group, processes that left the group with ``setsid``, and with
``env -i``) is frozen, killed and reaped when the attempt ends, however it ends. Its output is masked as it
arrives and its log keeps the first and last ``LOG_HEAD`` bytes, so the log never needs a second look.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from prime_ci.activity import doing
from prime_ci.errors import ConfigError, PersistenceError
from prime_ci.gates.failures import scan_log
from prime_ci.gates.feedback import feedback_message
from prime_ci.gates.fingerprint import DEFAULT_EXCLUDES, workspace_fingerprint
from prime_ci.gates.junit import (
    JUnitFailure,
    ended,
    parse_junit_failures,
)
from prime_ci.gates.specs import GateSpec, gates_from_commands, load_gate_files, load_gate_files_from_ref
from prime_ci.isolation import spawn
from prime_ci.isolation.box import Box, run_of
from prime_ci.isolation.durable import describe
from prime_ci.isolation.limits import Events, Limits, human, reason
from prime_ci.isolation.paths import inside
from prime_ci.isolation.procs import kill_tree, send_signal
from prime_ci.isolation.redact import StreamRedactor
from prime_ci.isolation.untrusted import TerminalBytes

MARKER_VAR = "PRIME_CI_GATE_TOKEN"
HEAD_BYTES = TAIL_BYTES = 32 * 1024
LOG_HEAD = LOG_TAIL = 8 * 1024 * 1024
MAX_JUNIT_BYTES = 50 * 1024 * 1024
# The run's own report dir and tool caches that gates themselves rewrite: never a workspace change.



@dataclass
class GateResult:
    name: str
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    output: str
    output_bytes: int
    duration_s: float
    attempts: int
    flaky: bool
    log_path: Path
    failures: list[JUnitFailure] = field(default_factory=list)
    timeout_s: float | None = None
    # Where ``failures`` came from: the gate's JUnit report, or its full log when the report named none
    # (``run_gate`` parses the log of every failed gate without JUnit failures; None: not parsed).
    failures_source: Literal["junit", "log"] | None = None
    more_failures: int = 0  # failing tests the log names beyond ``failures``

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, without the output text (that is in ``log_path``)."""
        return {
            "name": self.name,
            "command": self.command,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "output_bytes": self.output_bytes,
            "duration_s": round(self.duration_s, 3),
            "attempts": self.attempts,
            "flaky": self.flaky,
            "log_path": str(self.log_path),
            "timeout_s": self.timeout_s,
            "failures": [asdict(f) for f in self.failures],
            "failures_source": self.failures_source,
            "more_failures": self.more_failures,
        }


class _HeadTail:
    """The first and last bytes of a stream of any length."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * TAIL_BYTES:
                del self.tail[:-TAIL_BYTES]

    def text(self) -> str:
        tail = bytes(self.tail[-TAIL_BYTES:])
        elided = self.total - len(self.head) - len(tail)
        if elided <= 0:
            return (bytes(self.head) + tail).decode(errors="replace")
        marker = f"\n[... {elided} bytes elided; the full output is in the log ...]\n"
        return bytes(self.head).decode(errors="replace") + marker + tail.decode(errors="replace")


class _Sink(asyncio.Protocol):
    """Cleans (terminal sequences) and masks the gate's merged stdout/stderr as it arrives and appends it to
    its log up to ``LOG_HEAD`` bytes; keeps the last ``LOG_TAIL`` for the end of the log, and head+tail in memory."""

    def __init__(self, log: BinaryIO) -> None:
        self.log = log
        self.buffer = _HeadTail()
        self.error: OSError | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # before masking: an escape sequence inside a secret must not hide it; hold=0 keeps the log streaming
        # (only an escape sequence cut by a read waits for the next one), so a watched log is never a line behind
        self._terminal = TerminalBytes(hold=0)
        self._redactor = StreamRedactor()
        self._logged = 0
        self._log_tail = bytearray()

    def data_received(self, data: bytes) -> None:
        self._add(self._redactor.feed(self._terminal.feed(data)))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def finish(self, note: str | None) -> None:
        """The end of the stream: what was held back, the log's tail and a line on a limit that was hit."""
        self._add(self._redactor.feed(self._terminal.flush()))
        self._add(self._redactor.end())
        tail = bytes(self._log_tail[-LOG_TAIL:])
        if elided := self.buffer.total - self._logged - len(tail):
            self._write(f"\n[... {elided} bytes elided: the log keeps the first and the last {human(LOG_TAIL)} "
                        "...]\n".encode())
        self._write(tail)
        if note:
            line = f"\n[prime-ci] {note}\n".encode()
            self.buffer.add(line)
            self._write(line)

    def _add(self, data: bytes) -> None:
        self.buffer.add(data)
        room = LOG_HEAD - self._logged
        if room > 0:
            self._write(data[:room])
            self._logged += min(room, len(data))
            data = data[room:]
        if data:
            self._log_tail += data
            if len(self._log_tail) > 2 * LOG_TAIL:
                del self._log_tail[:-LOG_TAIL]

    def _write(self, data: bytes) -> None:
        if self.error is None and data:
            try:
                self.log.write(data)
            except OSError as exc:
                self.error = exc


def _junit_signature(path: Path | None) -> tuple[int, int, int] | None:
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read_junit(spec: GateSpec, cwd: Path, before: tuple[int, int, int] | None) -> list[JUnitFailure]:
    if spec.junit is None:
        return []
    path = cwd / spec.junit
    after = _junit_signature(path)
    if after is None or after == before:
        return []  # not written by this attempt: a stale report must not be reported
    resolved = path.resolve()
    if not inside(cwd, resolved, resolve=True) or not resolved.is_file() or after[2] > MAX_JUNIT_BYTES:
        return []
    try:
        return parse_junit_failures(resolved, cwd=cwd)
    except (ValueError, OSError, SyntaxError):  # ET.ParseError is a SyntaxError
        return []


async def _attempt(
    spec: GateSpec, cwd: Path, env: dict[str, str], log_path: Path, kill_grace: float, launcher: Sequence[str],
    limits: Limits,
) -> tuple[int | None, bool, str, int, list[JUnitFailure]]:
    token = secrets.token_hex(16)
    needle = f"{MARKER_VAR}={token}".encode()
    full_env = {**env, **spec.env, MARKER_VAR: token}
    junit_path = cwd / spec.junit if spec.junit else None
    junit_before = _junit_signature(junit_path)
    loop = asyncio.get_running_loop()
    try:
        log = log_path.open("wb", buffering=0)
    except OSError as exc:
        raise PersistenceError(f"cannot write {log_path}: {describe(exc)}") from exc
    with log:
        read_fd, write_fd = os.pipe()
        sink = _Sink(log)
        try:
            transport, _ = await loop.connect_read_pipe(lambda: sink, os.fdopen(read_fd, "rb", buffering=0))
        except BaseException:
            os.close(write_fd)
            raise
        box = Box.create(limits, run=run_of(env), name="gate")
        try:
            proc = await spawn.start([*launcher, "bash", "-c", spec.command], cwd=cwd, env=full_env, out=write_fd,
                                     box=box)
        except BaseException:  # the box is removed by spawn
            transport.close()
            raise
        finally:
            os.close(write_fd)
        cleaned = False
        timed_out = False
        note = None
        try:
            try:
                await asyncio.wait_for(proc.wait(), spec.timeout)
            except TimeoutError:
                timed_out = True
                send_signal(proc.pid, signal.SIGTERM, group=True)
                deadline = loop.time() + kill_grace
                while loop.time() < deadline and _group_alive(proc.pid):
                    await asyncio.sleep(0.05)
            note = reason(limits, Events(), box.events(), proc.returncode)
            if timed_out:
                stopped = f"stopped: {ended(None, True, spec.timeout)} (the gate's timeout)"
                note = f"{stopped}; {note}" if note else stopped
            kill_tree(proc.pid, needle, proc.pid, box)
            cleaned = True
            returncode = await proc.wait()
            # A writer we could not kill may still hold the pipe: then stop reading after a while.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(sink.closed), 2.0)
        finally:
            if not cleaned:  # cancelled (run wall clock) or failed: nothing may outlive the gate
                kill_tree(proc.pid, needle, proc.pid, box)
            transport.close()
            sink.finish(note)
    if sink.error is not None:
        raise PersistenceError(f"cannot write {log_path}: {describe(sink.error)}") from sink.error
    exit_code = None if timed_out else (128 - returncode if returncode < 0 else returncode)
    failures = _read_junit(spec, cwd, junit_before)
    return exit_code, timed_out, sink.buffer.text(), sink.buffer.total, failures


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def run_gate(
    spec: GateSpec,
    *,
    cwd: Path,
    env: dict[str, str],
    log_dir: Path,
    limits: Limits,
    kill_grace: float = 2.0,
    launcher: Sequence[str] = (),
    kind: str = "gate",
) -> GateResult:
    """Run one gate (with its reruns) in ``cwd``; the output of the last attempt is ``<name>.log``.

    ``limits``: each attempt's box (the run's). ``launcher``: an argv prefix for ``bash -c COMMAND`` (a sandbox
    command line ending in ``--``). ``kind``: what the run's status line calls it (gate, build, setup).
    """
    log_path = log_dir / f"{spec.name}.log"
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        for stale in log_dir.glob(f"{spec.name}.attempt-*.log"):
            stale.unlink()
    except OSError as exc:
        raise PersistenceError(f"cannot prepare the gate logs in {log_dir}: {describe(exc)}") from exc
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        with doing(f"{kind} {spec.name}" + (f" (attempt {attempts})" if attempts > 1 else "")):
            exit_code, timed_out, output, size, failures = await _attempt(spec, cwd, env, log_path, kill_grace,
                                                                          launcher, limits)
        passed = exit_code == 0
        if passed or attempts > spec.reruns:
            break
        try:
            os.replace(log_path, log_dir / f"{spec.name}.attempt-{attempts}.log")
        except OSError as exc:
            raise PersistenceError(f"cannot keep {log_path} as an attempt log: {describe(exc)}") from exc
    source: Literal["junit", "log"] | None = "junit" if failures else None
    more = 0
    if not passed and not failures:
        (failures, more), source = await asyncio.to_thread(scan_log, log_path, cwd=cwd), "log"
    return GateResult(
        name=spec.name,
        command=spec.command,
        passed=passed,
        exit_code=exit_code,
        timed_out=timed_out,
        output=output,
        output_bytes=size,
        duration_s=time.monotonic() - started,
        attempts=attempts,
        flaky=passed and attempts > 1,
        log_path=log_path,
        failures=failures,
        timeout_s=spec.timeout,
        failures_source=source,
        more_failures=more,
    )


async def run_gates(
    specs: list[GateSpec],
    *,
    cwd: Path,
    env: dict[str, str],
    log_dir: Path,
    limits: Limits,
    only: str | None = None,
    launcher: Sequence[str] = (),
) -> list[GateResult]:
    """Run the gates one after another, in order (``only``: just the gate of that name)."""
    if only is not None:
        selected = [s for s in specs if s.name == only]
        if not selected:
            known = ", ".join(s.name for s in specs) or "none"
            raise ConfigError(f"unknown gate {only!r} (gates: {known})")
        specs = selected
    return [await run_gate(spec, cwd=cwd, env=env, log_dir=log_dir, launcher=launcher, limits=limits)
            for spec in specs]


__all__ = ["DEFAULT_EXCLUDES", "MARKER_VAR", "GateResult", "GateSpec", "feedback_message", "gates_from_commands",
           "load_gate_files", "load_gate_files_from_ref", "run_gate", "run_gates", "workspace_fingerprint"]
