"""A kernel that never started: the run stops with a documented exit and the kernel's log kept (DESIGN §14).

The log lives in the worktree's root, which goes when the run ends; it is copied to ``OUT/kernel.log``. A line
from bubblewrap or from the sandbox's loader means the sandbox could not start it (exit 5); anything else is the
environment it was started in: the interpreter, its packages, the limits (exit 9, as a setup that failed).
"""

from __future__ import annotations

from pathlib import Path

from prime_ci.errors import KernelLost
from prime_ci.isolation import durable
from prime_ci.isolation.untrusted import clean_terminal_text
from prime_ci.stops import Stop, StopReason

SANDBOX_LINES = ("bwrap: ", "prime-ci: ")  # bubblewrap's own errors, and the seccomp loader's
MAX_QUOTED = 300


def kernel_failed(exc: KernelLost, out: Path, *, sandboxed: bool) -> Stop:
    """The run's stop for a kernel that did not start, after keeping its log as ``out/kernel.log``."""
    text = exc.log.read_text(encoding="utf-8", errors="replace") if exc.log and exc.log.is_file() else ""
    kept = out / "kernel.log"
    durable.write(kept, text, redacted=True)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    sandbox_line = next((line for line in lines if line.startswith(SANDBOX_LINES)), None)
    if sandboxed and sandbox_line is not None:
        return Stop(StopReason.SANDBOX_UNAVAILABLE, f"the sandbox could not start the kernel: {_quoted(sandbox_line)}"
                    f" (its log: {kept}; --sandbox off runs without it)")
    last = _quoted(lines[-1]) if lines else "it printed nothing"
    return Stop(StopReason.SETUP_FAILED, f"the kernel could not start ({exc}): {last} (its log: {kept})")


def _quoted(line: str) -> str:
    line = clean_terminal_text(line)
    return line if len(line) <= MAX_QUOTED else line[:MAX_QUOTED] + "…"
