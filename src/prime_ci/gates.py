"""Quality gates: specs from TOML or ``--gate``, execution in their own process group, feedback, fingerprints.

A gate is hostile code from the worktree. It runs in a new session with exactly the environment it is
given plus a per-attempt marker variable; whatever it leaves behind (its process group, and processes that
left the group with ``setsid``) is frozen, killed and reaped when the attempt ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import shlex
import signal
import stat
import time
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prime_ci.durations import parse_duration
from prime_ci.errors import ConfigError
from prime_ci.junit import (
    JUnitFailure,
    clip_middle,
    failure_lines,
    parse_junit_failures,
    status_text,
    strip_ansi,
)
from prime_ci.procs import kill_tree, send_signal
from prime_ci.worktree import Worktree, read_file_at

MARKER_VAR = "PRIME_CI_GATE_TOKEN"
DEFAULT_TIMEOUT = 600.0
HEAD_BYTES = TAIL_BYTES = 32 * 1024
MAX_JUNIT_BYTES = 50 * 1024 * 1024
# The run's own report dir and tool caches that gates themselves rewrite: never a workspace change.
DEFAULT_EXCLUDES = (
    ".prime-ci", ".pytest_cache", ".mypy_cache", ".ruff_cache",
    ":(exclude,glob)**/__pycache__/**",
)

_NAME = r"^[A-Za-z0-9._-]+$"
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class GateSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_NAME, max_length=100)
    command: str = Field(min_length=1)
    timeout: float = DEFAULT_TIMEOUT
    junit: str | None = None
    reruns: int = Field(default=0, ge=0, le=10)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: object) -> object:
        if isinstance(value, str | int | float):
            try:
                return parse_duration(value, what="timeout")
            except ConfigError as exc:
                raise ValueError(str(exc).split(": ", 1)[-1]) from None
        return value

    @field_validator("junit")
    @classmethod
    def _junit(cls, value: str | None) -> str | None:
        if value is not None and (not value or value.startswith("/") or ".." in Path(value).parts):
            raise ValueError("must be a path inside the worktree (relative, no '..')")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not _ENV_KEY.match(key) or "\0" in val:
                raise ValueError(f"invalid environment variable {key!r}")
        return value


def _describe(exc: ValidationError, index: int) -> str:
    errors = exc.errors()
    err = errors[0]
    loc = ".".join(str(p) for p in err["loc"])
    where = f"gate[{index}]" + (f".{loc}" if loc else "")
    if err["type"] == "missing":
        msg = "field required"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field"
    else:
        msg = str(err["msg"]).removeprefix("Value error, ")
        msg = msg[:1].lower() + msg[1:]
    more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
    return f"{where}: {msg}{more}"


def _parse_gate_text(text: str, label: str, seen: dict[str, str]) -> list[GateSpec]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{label}: invalid TOML: {exc}") from None
    unknown = sorted(set(data) - {"gate"})
    if unknown:
        raise ConfigError(f"{label}: unknown top-level key {unknown[0]!r} (gate files hold [[gate]] tables)")
    tables = data.get("gate")
    if not tables:
        raise ConfigError(f"{label}: no [[gate]] tables")
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{label}: gate: must be [[gate]] tables")
    specs = []
    for index, table in enumerate(tables):
        try:
            spec = GateSpec.model_validate(table)
        except ValidationError as exc:
            raise ConfigError(f"{label}: {_describe(exc, index)}") from None
        if spec.name in seen:
            raise ConfigError(
                f"{label}: gate[{index}].name: duplicate gate name {spec.name!r} (also in {seen[spec.name]})"
            )
        seen[spec.name] = label
        specs.append(spec)
    return specs


def load_gate_files(paths: list[Path]) -> list[GateSpec]:
    """Gates from TOML files in the filesystem; ConfigError (one line, file and field) on any problem."""
    seen: dict[str, str] = {}
    specs: list[GateSpec] = []
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{path}: gate file not found") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: gate file is not UTF-8") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read gate file: {exc.strerror}") from None
        specs.extend(_parse_gate_text(text, str(path), seen))
    return specs


def load_gate_files_from_ref(git_dir: Path, ref: str, paths: list[str]) -> list[GateSpec]:
    """Gates from TOML files as committed at ``ref`` (e.g. the PR base): worktree edits cannot change them."""
    seen: dict[str, str] = {}
    specs: list[GateSpec] = []
    for path in paths:
        specs.extend(_parse_gate_text(read_file_at(git_dir, ref, path), f"{ref}:{path}", seen))
    return specs


_WRAPPERS = {"env", "time", "nice", "exec", "command", "nohup", "timeout"}
_RUNNERS = {"uv": "run", "poetry": "run", "pipx": "run", "hatch": "run", "pdm": "run"}
_PACKAGE_MANAGERS = {"npm", "yarn", "pnpm", "bun"}


def _command_word(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
    while words and Path(words[0]).name in _WRAPPERS:
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[1:]
    if not words:
        return ""
    first, rest = Path(words[0]).name, words[1:]
    if re.match(r"^python[0-9.]*$", first) and len(rest) >= 2 and rest[0] == "-m":
        return rest[1]
    if _RUNNERS.get(first) and rest[:1] == [_RUNNERS[first]] and len(rest) >= 2:
        return Path(rest[1]).name
    if first in ("npx", "pnpx", "bunx") and rest:
        return Path(rest[0]).name
    if first in _PACKAGE_MANAGERS and rest:
        task = rest[1] if rest[0] == "run" and len(rest) > 1 else rest[0]
        return f"{first}-{task}"
    return first


def gates_from_commands(commands: list[str]) -> list[GateSpec]:
    """Specs for ``--gate CMD`` flags, named after the command (``pytest``, ``ruff``, ``npm-test``...)."""
    specs: list[GateSpec] = []
    used: set[str] = set()
    for position, command in enumerate(commands, start=1):
        if not command.strip():
            raise ConfigError(f"--gate #{position}: empty command")
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", _command_word(command)).strip("-.")[:60]
        name, suffix = slug or f"gate-{position}", position
        while name in used:
            name, suffix = f"{slug or 'gate'}-{suffix}", suffix + 1
        used.add(name)
        specs.append(GateSpec(name=name, command=command))
    return specs


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
    """Appends the gate's merged stdout/stderr to its log as it arrives and keeps head+tail in memory."""

    def __init__(self, log: BinaryIO) -> None:
        self.log = log
        self.buffer = _HeadTail()
        self.error: OSError | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.buffer.add(data)
        if self.error is None:
            try:
                self.log.write(data)
            except OSError as exc:
                self.error = exc

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


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
    if not resolved.is_relative_to(cwd.resolve()) or not resolved.is_file() or after[2] > MAX_JUNIT_BYTES:
        return []
    try:
        return parse_junit_failures(resolved)
    except (ValueError, OSError, SyntaxError):  # ET.ParseError is a SyntaxError
        return []


async def _attempt(
    spec: GateSpec, cwd: Path, env: dict[str, str], log_path: Path, kill_grace: float, launcher: Sequence[str]
) -> tuple[int | None, bool, str, int, list[JUnitFailure]]:
    token = secrets.token_hex(16)
    full_env = {**env, **spec.env, MARKER_VAR: token}
    junit_path = cwd / spec.junit if spec.junit else None
    junit_before = _junit_signature(junit_path)
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    with log_path.open("wb", buffering=0) as log:
        sink = _Sink(log)
        try:
            transport, _ = await loop.connect_read_pipe(lambda: sink, os.fdopen(read_fd, "rb", buffering=0))
        except BaseException:
            os.close(write_fd)
            raise
        try:
            proc = await asyncio.create_subprocess_exec(
                *launcher, "bash", "-c", spec.command, cwd=cwd, env=full_env, stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            )
        except BaseException:
            transport.close()
            raise
        finally:
            os.close(write_fd)
        cleaned = False
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), spec.timeout)
            except TimeoutError:
                timed_out = True
                send_signal(proc.pid, signal.SIGTERM, group=True)
                deadline = loop.time() + kill_grace
                while loop.time() < deadline and _group_alive(proc.pid):
                    await asyncio.sleep(0.05)
            kill_tree(proc.pid, f"{MARKER_VAR}={token}".encode(), proc.pid)
            cleaned = True
            returncode = await proc.wait()
            # A writer we could not kill may still hold the pipe: then stop reading after a while.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(sink.closed), 2.0)
        finally:
            if not cleaned:  # cancelled (run wall clock) or failed: nothing may outlive the gate
                kill_tree(proc.pid, f"{MARKER_VAR}={token}".encode(), proc.pid)
            transport.close()
    if sink.error is not None:
        raise sink.error
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
    kill_grace: float = 2.0,
    launcher: Sequence[str] = (),
) -> GateResult:
    """Run one gate (with its reruns) in ``cwd``; the full output of the last attempt is ``<name>.log``.

    ``launcher``: an argv prefix for ``bash -c COMMAND`` (a sandbox command line ending in ``--``).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.name}.log"
    for stale in log_dir.glob(f"{spec.name}.attempt-*.log"):
        stale.unlink()
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        exit_code, timed_out, output, size, failures = await _attempt(spec, cwd, env, log_path, kill_grace, launcher)
        passed = exit_code == 0
        if passed or attempts > spec.reruns:
            break
        os.replace(log_path, log_dir / f"{spec.name}.attempt-{attempts}.log")
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
    )


async def run_gates(
    specs: list[GateSpec],
    *,
    cwd: Path,
    env: dict[str, str],
    log_dir: Path,
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
    return [await run_gate(spec, cwd=cwd, env=env, log_dir=log_dir, launcher=launcher) for spec in specs]


def _gate_section(result: GateResult, budget: int, log_hint: str) -> str:
    footer = f"Full log: {log_hint}{result.name}.log (the full text is available as `gates.last` in the kernel)\n"
    top = f"\n## gate {result.name}: {status_text(result)}\n$ {clip_middle(result.command, 300)}\n"
    room = budget - len(top) - len(footer)
    lines = failure_lines(result)
    body = ""
    if lines:
        label = "failing tests (JUnit):\n" if result.failures else "failing tests (from the full log):\n"
        listing = clip_middle(label + "".join(f"- {line}\n" for line in lines), max(room // 2, 0))
        body += listing
    if result.failures:
        per = max((room - len(body)) // len(result.failures[:10]) - 40, 0)
        for f in result.failures[:10]:
            if per > 80 and f.text.strip():
                body += f"\n{f.test}:\n{clip_middle(strip_ansi(f.text).strip(), per)}\n"
    else:
        label = "output (head+tail):\n"
        room = max(room - len(body) - len(label), 0)
        body += label + clip_middle(strip_ansi(result.output), room, "bytes", result.output_bytes)
        body = body if body.endswith("\n") else body + "\n"
    section = top + body
    if len(section) + len(footer) > budget:
        section = section[: max(budget - len(footer), 0)]
    return (section + footer)[:budget]


def feedback_message(results: list[GateResult], *, limit: int = 6000, log_hint: str = "gates/") -> str:
    """One user message naming every failing gate, within ``limit`` chars in all."""
    failing = [r for r in results if not r.passed]
    if not failing:
        return f"All {len(results)} gates passed."
    head = f"{len(failing)} of {len(results)} gates failed: {', '.join(r.name for r in failing)}.\n"
    budget = max(limit - len(head), 0) // len(failing)
    return (head + "".join(_gate_section(r, budget, log_hint) for r in failing))[:limit]


def _digest_untracked(root_fd: int, rel: bytes) -> bytes:
    """Content hash of one untracked file, opened beneath the worktree without following any symlink."""
    parts = rel.rstrip(b"/").split(b"/")
    opened: list[int] = []
    directory = root_fd
    try:
        dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        for part in parts[:-1]:
            directory = os.open(part, dir_flags, dir_fd=directory)
            opened.append(directory)
        st = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return b"link:" + os.fsencode(os.readlink(parts[-1], dir_fd=directory))
        if not stat.S_ISREG(st.st_mode):
            return b"mode:%o" % stat.S_IFMT(st.st_mode)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(parts[-1], flags, dir_fd=directory)
        digest = hashlib.sha256()
        with os.fdopen(fd, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        return b"file:" + digest.digest()
    except OSError as exc:  # vanished, or a path component swapped for a symlink
        return b"error:%d" % (exc.errno or 0)
    finally:
        for fd in opened:
            os.close(fd)


def workspace_fingerprint(wt: Worktree, exclude: list[str]) -> str:
    """sha256 over HEAD, status, the binary diff against HEAD and every untracked file's content."""
    specs = ["--", ".", *(p if p.startswith(":(") else f":(exclude){p}" for p in
             (*DEFAULT_EXCLUDES, *wt.excludes, *exclude))]
    digest = hashlib.sha256()
    head = wt.git(["rev-parse", "--verify", "--quiet", "HEAD"], check=False).stdout
    status = wt.git(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", *specs]).stdout
    diff = wt.git(["diff", "--binary", "--no-ext-diff", "--no-textconv", "HEAD", *specs]).stdout
    for label, blob in ((b"head", head), (b"status", status), (b"diff", diff)):
        digest.update(b"%s\0%d\0" % (label, len(blob)) + blob)
    untracked = sorted(entry[3:] for entry in status.split(b"\0") if entry.startswith(b"?? "))
    root_fd = os.open(wt.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for rel in untracked:
            digest.update(b"untracked\0" + rel + b"\0" + _digest_untracked(root_fd, rel) + b"\0")
    finally:
        os.close(root_fd)
    return digest.hexdigest()
