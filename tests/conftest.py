"""Shared fixtures: real git repos, the installed CLI in a subprocess, the scripted provider on loopback."""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import fcntl
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import prime_ci
from prime_ci.isolation.cgroups import usable
from prime_ci.isolation.worktree import Worktree
from prime_ci.testing import RecordedRequest, ScriptedServer

PRIME_CI = shutil.which("prime-ci", path=os.path.dirname(sys.executable)) or "prime-ci"

BUGGY = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    ".gitignore": "__pycache__/\n.pytest_cache/\n.prime-ci/\n",
}
# A cell (or helper process) standing for work that never ends: it blocks until it is interrupted or killed, so
# no duration can run out first on a slow machine (a lock wait is interruptible by signals on POSIX).
HANG = "import threading\nthreading.Event().wait()"

# A pytest gate for the tests' repositories, without the plugins of prime-ci's dev environment (its interpreter is
# the job's): importing them cost ~0.2 s of CPU a gate with pytest's rewrite cache beside them (pytest_configure
# below), ~0.6 s without, when hypothesis was among them (the nightly tier's environment still has it). The output
# and the exit codes are pytest's own.
PYTEST_GATE = ("python -m pytest -q -p no:hypothesispytest -p no:benchmark -p no:xdist -p no:xdist.looponfail "
               "-p no:timeout -p no:anyio -p no:platformdirs")

FIX = (
    "from pathlib import Path\n"
    "p = Path('calc.py')\n"
    "p.write_text(p.read_text().replace('a - b', 'a + b'))\n"
)


def pytest_configure(config: pytest.Config) -> None:
    """Before any worker starts: pytest's assertion-rewrite cache for the dev environment's plugins, written beside
    their sources, as a job that ran its tests before prime-ci has it. Gates running this interpreter read that
    cache (isolation/project_layer.py trusts it beside the interpreter's own files). With PYTHONDONTWRITEBYTECODE
    set, as on this project's CI machines, a fresh venv has none until some test's pytest happens to write it:
    until then, and in every run of a subset, each such gate rewrote hypothesis and the other plugins again
    (~0.4 s of CPU a gate). The no-cache path has its own tests (test_host_rewrite_cache.py).

    Side effect: one pytest process writes bytecode (the rewrite cache and any missing ``.pyc``) into the venv's
    site-packages, whatever PYTHONDONTWRITEBYTECODE says. A venv that cannot be written keeps the slower gates."""
    if hasattr(config, "workerinput"):
        return
    # prime-ci's own bytecode, as an installed prime-ci has it (pip compiles at install): an editable install
    # under PYTHONDONTWRITEBYTECODE has none, and every prime-ci process the tests start (~300: runs, bench
    # tasks, children) compiled ~100 modules again (~0.1 s of CPU each). The bundled projects are data.
    compileall.compile_dir(Path(prime_ci.__file__).parent, quiet=1, rx=re.compile(r"/(demo/repo|bench_demo/repos)/"))
    drop = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTEST_ADDOPTS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    with tempfile.TemporaryDirectory() as empty:  # no tests and no conftest: only the plugins load
        ini = Path(empty) / "pytest.ini"  # the rootdir and configuration: nothing found above $TMPDIR applies
        ini.write_text("[pytest]\n")
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                            "-c", str(ini), "--rootdir", empty, empty],
                           cwd=empty, env=env, capture_output=True, timeout=300, check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that start ``prime-ci`` first, then whole runs in process, the unit tier last: a stable sort, so
    files keep their order. The long tests start early and the sub-second ones fill the end; with
    ``--dist worksteal`` an idle worker takes tests queued on another, so the contiguous slices xdist deals out
    first do not decide who finishes last."""
    def layer(item: pytest.Item) -> float:
        if any(word in item.nodeid.lower() for word in ("litellm", "anthropic")):
            return 0.5  # side by side, whatever their layer: few workers pay for importing litellm (~5 s of CPU)
        parts = Path(str(item.path)).relative_to(Path(__file__).parent).parts
        return {"runs": 1, "unit": 2}.get(parts[0], 0) if len(parts) > 1 else 0
    items.sort(key=layer)


def make_repo(root: Path, files: dict[str, str], *, message: str = "init") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    if not (root / ".git").exists():
        subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", message], cwd=root, check=True)
    return root


def repo_script(path: str) -> ModuleType:
    """A standalone script of this repository (``action/helper.py``, ``publish/helper.py``: they run without
    prime-ci installed) loaded as a module for its functions."""
    spec = importlib.util.spec_from_file_location(path.removesuffix(".py").replace("/", "_"),
                                                  Path(__file__).resolve().parents[1] / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def by_cgroup(controller: str) -> bool:
    """Whether prime-ci enforces this limit with a cgroup here (as root in most containers); else by an rlimit
    (another user: the host's cgroups are root's), which makes a process fail, not the box kill it, and names no
    limit: a fork is refused with EAGAIN, an allocation raises MemoryError in the process that asked."""
    return controller in {c for h in usable() for c in h.controllers}


def job_bin(tmp: Path) -> Path:
    """A CI job's ``bin`` directory whose ``python3`` (and ``python``) sees what the tests' interpreter sees
    (pytest among it): an environment of its own, as setup-python leaves a job, over the tests' site
    directories. Not a link to the tests' base interpreter: that is the machine's Python, which need not have
    pytest (root's pyenv here has it, /usr/bin/python3 for another user has not)."""
    root = tmp / "job-python"
    if not (root / "pyvenv.cfg").exists():
        venv.create(root, symlinks=True, with_pip=False)
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
        (root / "lib" / version / "site-packages" / "tests-site.pth").write_text(
            "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
    return root / "bin"


def repo_worktree(tmp_path: Path, files: dict[str, str]) -> Worktree:
    """A committed repository under ``tmp_path/repo`` used as a run's worktree as it is (no clone): for a judge or
    gate runner driven in process."""
    repo = make_repo(tmp_path / "repo", files)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    return Worktree(repo, repo / ".git", head.stdout.strip(), tmp_path, str(repo))


def repo_state(root: Path) -> tuple[str, str, str]:
    """HEAD, status and the config of a repo: what "untouched" means."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=root, capture_output=True,
                            text=True).stdout
    return head, status, (root / ".git" / "config").read_text()


@dataclass
class Outcome:
    proc: subprocess.CompletedProcess[str]
    out: Path

    @property
    def code(self) -> int:
        return self.proc.returncode

    @property
    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / "result.json").read_text())
        return data

    def session(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.out / "session.jsonl").read_text().splitlines()]


def run_cli(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    # as in a job that activated the environment prime-ci (and pytest) is installed in: the project's
    # interpreter found on PATH is that one
    full_env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), full_env.get("PATH", os.defpath)])
    full_env.update(env or {})
    return subprocess.run([PRIME_CI, *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def buggy_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", BUGGY)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: every connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def run_prime(
    tmp_path: Path, repo: Path, server: ScriptedServer, *extra: str, task: str = "Fix the failing test.",
    env: dict[str, str] | None = None, timeout: float = 180,
) -> Outcome:
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
    args = ["run", str(repo), "--task", task, "--model", "openai/scripted", "--api-base", server.url,
            "--out", str(out), *extra]
    proc = run_cli(args, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test-canary", **(env or {})}, timeout=timeout)
    return Outcome(proc, out)


def cli_inproc(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``run_cli`` without the process: the same entry point (``prime_ci.cli:main``), arguments, environment,
    working directory, empty stdin and non-terminal stdout/stderr, run in this process (no interpreter start,
    the imports paid once per worker). For promises that are not about the process boundary; what only a process
    shows stays with ``run_cli``: signals and kills, the interpreter's exit, and whatever a process reads once
    (``TMPDIR``: ``tempfile`` keeps the first directory it found; the host set-up's subreaper and undumpable
    flags stay on this process)."""
    from prime_ci.cli import main

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    full_env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), full_env.get("PATH", os.defpath)])
    full_env.update(env or {})
    saved_env, saved_argv, saved_term = dict(os.environ), sys.argv, signal.getsignal(signal.SIGTERM)
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    os.environ.clear()
    os.environ.update(full_env)
    sys.argv = [PRIME_CI, *args]
    try:
        with contextlib.chdir(cwd), open(os.devnull) as stdin, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            saved_stdin, sys.stdin = sys.stdin, stdin
            try:
                main()
            except SystemExit as exc:
                code = exc.code
            finally:
                sys.stdin = saved_stdin
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        signal.signal(signal.SIGTERM, saved_term)
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess([PRIME_CI, *args], returncode, out.getvalue(), err.getvalue())


def run_inproc(
    tmp_path: Path, repo: Path, server: ScriptedServer, *extra: str, task: str = "Fix the failing test.",
    env: dict[str, str] | None = None,
) -> Outcome:
    """``run_prime`` in this process (see ``cli_inproc``)."""
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
    args = ["run", str(repo), "--task", task, "--model", "openai/scripted", "--api-base", server.url,
            "--out", str(out), *extra]
    proc = cli_inproc(args, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test-canary", **(env or {})})
    return Outcome(proc, out)


def live_processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line contains ``marker``."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        alive.append(int(entry.name))
            except OSError:
                continue
    return alive


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A directory ``build`` fills once per test session, whichever xdist worker asks first; the others wait on a
    lock and reuse it. For costly read-only module fixtures: ``--dist worksteal`` may split a module's tests over
    workers, and each worker would otherwise build the fixture again. After a failed build the next caller
    starts again from an empty directory (and fails the same way)."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, shared by its workers
    target = root / f"once-{name}"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".built").exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            build(target)
            (target / ".built").touch()
    return target


# --- waiting on conditions (never on fixed sleeps): generous deadlines, since a loaded runner is slow ---------


def wait_until(condition: Callable[[], object], *, timeout: float = 60.0, what: str = "the condition",
               interval: float = 0.02) -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# ``wait_until`` for code in a kernel cell or a script (another process, often sandboxed), without a polling
# interval: ``until(condition, directories, what)`` checks ``condition`` again whenever an entry of one of
# ``directories`` is created, written, renamed into place or touched (inotify, watched before the first check, so
# no change is missed), and fails naming ``what`` after ``timeout`` seconds.
UNTIL = """
import ctypes as _ctypes, os as _os, select as _select, time as _time
def until(condition, directories, what, timeout=120):
    libc = _ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(_os.O_CLOEXEC)
    if fd < 0:
        raise OSError(_ctypes.get_errno(), 'inotify_init1')
    try:
        for directory in directories:  # IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE
            if libc.inotify_add_watch(fd, _os.fsencode(str(directory)), 0x2 | 0x4 | 0x8 | 0x80 | 0x100) < 0:
                raise OSError(_ctypes.get_errno(), f'inotify_add_watch {directory}')
        deadline = _time.monotonic() + timeout
        while not condition():
            left = deadline - _time.monotonic()
            assert left > 0, f'timed out after {timeout}s waiting for {what}'
            if _select.select([fd], [], [], left)[0]:
                _os.read(fd, 1 << 16)
    finally:
        _os.close(fd)
"""

# ``until`` for a gate script that waits for the host: ``logged(text)`` returns once the file named by ``log``
# holds the bytes ``text`` (looked at again as the host writes it), and fails naming them after ``timeout`` seconds.
LOGGED = UNTIL + """
def logged(text, timeout=60):
    until(lambda: _os.path.exists(log) and text in open(log, "rb").read(), [_os.path.dirname(log)],
          f"the host to log {text!r}", timeout)
"""


async def wait_until_async(condition: Callable[[], object], *, timeout: float = 60.0, what: str = "the condition",
                           interval: float = 0.02) -> None:
    """``wait_until`` for a test that must keep its event loop running (e.g. a gate task) while it waits."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


def wait_for_chat(
    server: ScriptedServer, n: int, proc: subprocess.Popen[Any] | None = None, *, timeout: float = 120.0
) -> list[RecordedRequest]:
    """Until ``server`` has recorded ``n`` chat requests; fails at once when ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return server.wait_for_requests(n, timeout=0.5, chat=True)
        except TimeoutError:
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"the process exited ({proc.returncode}) before chat request {n}") from None
            if time.monotonic() >= deadline:
                raise AssertionError(f"no chat request {n} within {timeout:.0f}s") from None


def load_factor() -> float:
    """How much slower than an idle machine this one may be now: the 1-minute load average per core, >= 1.
    A latency promise measured by a test (e.g. "stops within 5 s") is scaled by it."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
