"""What a run is doing now (a model call, a cell, a setup command, a build, a gate), for the live status line.

The engine and the gate runner mark their phases with ``doing(label)``; a run installs its ``Activity`` with
``watch`` and the status line reads ``Activity.latest``. Phases nest within a task (a compaction's model call
is ``compaction › model call``) and tasks started inside a watched run inherit it. Outside a run (``prime-ci
gates``, a child host, unit tests) marking does nothing. Marking is one dict insert and removal per phase.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

NEST = " › "


@dataclass(frozen=True)
class Phase:
    label: str  # "model call", "gate tests", "compaction › model call"
    since: float  # time.monotonic() when it began
    turn: bool = False  # the root's turn call: the turn in progress is the next one


class Activity:
    """The phases open now, in every task of one run."""

    def __init__(self) -> None:
        self._open: dict[int, Phase] = {}
        self._keys = itertools.count()

    def enter(self, phase: Phase) -> int:
        key = next(self._keys)
        self._open[key] = phase
        return key

    def leave(self, key: int) -> None:
        self._open.pop(key, None)

    def latest(self) -> Phase | None:
        """The phase begun last of those still open (the innermost, when they nest)."""
        return max(self._open.values(), key=lambda p: p.since, default=None)

    def in_turn_call(self) -> bool:
        return any(p.turn for p in self._open.values())


_activity: ContextVar[Activity | None] = ContextVar("prime_ci_activity", default=None)
_path: ContextVar[tuple[str, ...]] = ContextVar("prime_ci_phase_path", default=())


def watch(activity: Activity) -> None:
    """Record the phases of the current task, and of the tasks it starts from now on, in ``activity``."""
    _activity.set(activity)


@contextmanager
def doing(label: str, *, turn: bool = False) -> Iterator[None]:
    activity = _activity.get()
    if activity is None:
        yield
        return
    path = (*_path.get(), label)
    token = _path.set(path)
    key = activity.enter(Phase(NEST.join(path), time.monotonic(), turn))
    try:
        yield
    finally:
        activity.leave(key)
        _path.reset(token)
