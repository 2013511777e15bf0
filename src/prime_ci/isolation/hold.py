"""The model's processes held still while the verdict is made.

A cell can leave a process running (``setsid``, a double fork) in the worktree it shares with the gates. Left
free during a gate round, it could show the gates one file and the patch another: a fixed module swapped in as the
tests open it and the bug put back once they have read it is a green run with an empty patch. So for each round
(builds, gates, and the workspace fingerprint taken after them) every process of the run's kernel boxes, the rlm
children's included, is stopped (SIGSTOP, rescanning for forks, as a kill freezes them first), and continued
after. A kernel box's processes are found by the box's cgroup (which they cannot leave) and by the run's rlimit
marker; prime-ci's own processes (the run, children's hosts) are in no box and keep running.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prime_ci.isolation import cgroups
from prime_ci.isolation.box import run_marker
from prime_ci.isolation.procs import cgroup_members, limit_marked, send_signal

KERNEL_BOX = "kernel-"  # the names of kernel boxes (kernel/launch.py); gate and setup boxes are never held
RESCANS = 50


def _kernel_cgroups(run: str) -> list[Path]:
    return [path for path in cgroups.run_cgroups(run) if path.name.startswith(KERNEL_BOX)]


def members(run: str) -> dict[int, int]:
    """pid -> start time of the processes in the run's kernel boxes: in their cgroups, or with the run's marker
    (before a round, only kernels and what they started carry it: no gate or setup box is running)."""
    found = limit_marked(hard=run_marker(run))
    for path in _kernel_cgroups(run):
        found.update(cgroup_members(path))
    found.pop(os.getpid(), None)
    return found


def stop(run: str) -> dict[int, int]:
    """Stop every process of the run's kernel boxes, rescanning until no new one appears; the ones stopped."""
    held: dict[int, int] = {}
    for _ in range(RESCANS):
        new = {pid: start for pid, start in members(run).items() if held.get(pid) != start}
        if not new:
            break
        for pid in new:
            send_signal(pid, signal.SIGSTOP)
        held.update(new)
    return held


def resume(held: dict[int, int]) -> None:
    for pid in held:
        send_signal(pid, signal.SIGCONT)


@contextmanager
def held(run: str) -> Iterator[int]:
    """The run's kernel boxes stopped for the block; how many processes were stopped."""
    stopped = stop(run)
    try:
        yield len(stopped)
    finally:
        resume(stopped)
