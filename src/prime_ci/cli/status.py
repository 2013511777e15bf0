"""A run's progress on the console: one live status line on a terminal, heartbeat lines in a log.

On a terminal (stderr a tty, not a GitHub Actions log, ``TERM`` not ``dumb``) the last line is redrawn at every
tick of the run (:mod:`prime_ci.engine.progress`): the phase and its time, the turn, tokens and cost against
their budgets, the wall clock against ``--max-wall``. Every line printed meanwhile goes through ``above``,
which clears the status line first and draws it again after, so nothing printed is garbled. Elsewhere (a CI
log, a pipe) nothing is redrawn; instead, when nothing was printed for ``PRIME_CI_HEARTBEAT_S`` seconds
(default 10), a heartbeat line says what the run is waiting for.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from prime_ci.activity import NEST
from prime_ci.durations import format_duration, parse_duration
from prime_ci.isolation.untrusted import visible
from prime_ci.money import usd

if TYPE_CHECKING:  # say() loads this module: it stays light
    from prime_ci.engine.progress import Status

HEARTBEAT_S = 10.0  # at most this long without a line in a log (plus one tick)
HEARTBEAT_VAR = "PRIME_CI_HEARTBEAT_S"
CLEAR = "\r\x1b[2K"  # to the start of the line, erase all of it
WAITING_FOR = {"model call": "the model", "cell": "the cell", "kernel start": "the kernel to start",
               "waiting for sub-agents": "sub-agents"}  # not "waiting for waiting for sub-agents"


class StatusLine:
    """The console side of ``engine.progress.Progress``."""

    def __init__(self, stream: TextIO, *, live: bool, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.stream = stream
        self.live = live
        self.heartbeat_s = heartbeat_s
        self.drawn = ""  # the status line on the screen now
        self.quiet_since = time.monotonic()  # when a line was last printed
        self._lock = threading.Lock()  # a line said from a worker thread never lands inside a redraw

    def update(self, status: Status) -> None:
        with self._lock:
            if self.live:
                self.drawn = _fit(visible(live_text(status)), _columns(self.stream))
                self._write(CLEAR + self.drawn)
            elif time.monotonic() - self.quiet_since >= self.heartbeat_s:
                self._write(f"prime-ci: {visible(heartbeat_text(status))}\n")
                self.quiet_since = time.monotonic()

    def close(self) -> None:
        global _current
        with self._lock:
            if self.drawn:
                self._write(CLEAR)
                self.drawn = ""
        if _current is self:
            _current = None

    @contextmanager
    def above(self) -> Iterator[None]:
        """Print lines of one's own in here: they go above the status line."""
        with self._lock:
            if self.drawn:
                self._write(CLEAR)
            try:
                yield
            finally:
                self.quiet_since = time.monotonic()
                if self.drawn:
                    self._write(self.drawn)

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


_current: StatusLine | None = None


def for_run() -> StatusLine:
    """The status line of this process's run, on stderr; ``say`` prints above it until it is closed."""
    global _current
    heartbeat = os.environ.get(HEARTBEAT_VAR)
    seconds = parse_duration(heartbeat, what=HEARTBEAT_VAR) if heartbeat else HEARTBEAT_S
    live = sys.stderr.isatty() and os.environ.get("GITHUB_ACTIONS") != "true" and os.environ.get("TERM") != "dumb"
    _current = StatusLine(sys.stderr, live=live, heartbeat_s=seconds)
    return _current


@contextmanager
def above() -> Iterator[None]:
    if _current is None:
        yield
    else:
        with _current.above():
            yield


def live_text(s: Status) -> str:
    doing = f"{s.phase} {_ticking(s.phase_s)}" if s.phase else "working"
    return f"» {doing} · {budgets(s)}"


def heartbeat_text(s: Status) -> str:
    if s.phase is None:
        return f"… still working · {budgets(s)}"
    *outer, last = s.phase.split(NEST)
    where = ", ".join([*outer, _ticking(s.phase_s)])
    return f"… waiting for {WAITING_FOR.get(last, last)} ({where}) · {budgets(s)}"


def budgets(s: Status) -> str:
    parts = [f"turn {s.turn}/{s.max_turns}", f"{_count(s.tokens)}/{_count(s.max_tokens)} tokens"]
    if s.cost_usd is None:
        parts.append("cost unknown" + (f"/{usd(s.max_cost_usd)}" if s.max_cost_usd is not None else ""))
    else:
        parts.append(usd(s.cost_usd) + (f"/{usd(s.max_cost_usd)}" if s.max_cost_usd is not None else ""))
    parts.append(f"wall {_ticking(s.wall_s)}/{format_duration(s.max_wall_s)}")
    return " · ".join(parts)


def _ticking(seconds: float) -> str:
    """A clock redrawn twice a second: whole seconds, so that the line does not flicker."""
    return format_duration(int(seconds))


def _count(n: int) -> str:
    if n < 1000:
        return str(n)
    value, unit = (n / 1000, "k") if n < 1_000_000 else (n / 1_000_000, "M")
    return f"{value:.1f}".removesuffix(".0") + unit


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        return 80


def _fit(text: str, columns: int) -> str:
    """One screen line: a line that wraps could no longer be erased whole."""
    return text if len(text) < columns else text[:max(columns - 2, 0)] + "…"
