"""Process cleanup: subreaper, marker sweeps, freeze-then-kill of process trees and boxes.

Process groups alone miss ``setsid`` escapees. Every process prime-ci starts for a run carries a marker
variable in its environment (inherited by everything it spawns, readable in ``/proc/<pid>/environ``), and runs
in a box (``box.Box``: a cgroup where the host allows one, and an rlimit marker) that ``env -i`` does not
leave either; a sweep finds and kills what is left by all three, and as a subreaper the host inherits the
orphans and reaps them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prime_ci.isolation import cgroups
from prime_ci.isolation.box import Box, run_marker


def enable_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``).

    Call once in the host before running gates: processes that escape a gate's group then re-parent here
    instead of to init, so they can be found and reaped. Returns False where unsupported.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # 36 = PR_SET_CHILD_SUBREAPER


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, starttime) of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[19])


def marked(needle: bytes) -> dict[int, int]:
    """pid -> starttime of live processes whose environment holds ``needle`` (unreadable ones skipped)."""
    found: dict[int, int] = {}
    me = os.getpid()
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if b"\0" + needle + b"\0" in b"\0" + environ:
            info = proc_stat(int(entry))
            if info is not None:
                found[int(entry)] = info[2]
    return found


def box_members(box: Box) -> dict[int, int]:
    """pid -> start time of the live processes in ``box``: in its cgroups, or carrying its rlimit marker."""
    found = limit_marked(soft=box.marker[0], hard=box.marker[1])
    for path in box.cgroups():
        found.update(cgroup_members(path))
    return found


def limit_marked(*, hard: int, soft: int | None = None) -> dict[int, int]:
    """pid -> start time of live processes with that RLIMIT_RTTIME marker (``box.Box``)."""
    found: dict[int, int] = {}
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/limits").read_bytes()
        except OSError:
            continue
        at = text.find(b"Max realtime timeout")
        words = text[at:].split(maxsplit=5) if at >= 0 else []
        if len(words) > 4 and words[4] == b"%d" % hard and (soft is None or words[3] == b"%d" % soft):
            info = proc_stat(int(entry))
            if info is not None and info[0] != "Z":
                found[int(entry)] = info[2]
    return found


def cgroup_members(path: Path) -> dict[int, int]:
    found: dict[int, int] = {}
    try:
        pids = [int(word) for word in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return found
    for pid in pids:
        info = proc_stat(pid)
        if info is not None and info[0] != "Z":
            found[pid] = info[2]
    return found


def send_signal(pid: int, sig: int, *, group: bool = False) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pgid: int, needle: bytes, leader: int, box: Box | None = None) -> None:
    """Freeze the group and every process marked with ``needle`` (``NAME=value`` in its environment) or in
    ``box``, rescanning for forks, SIGKILL them all, reap escapees. ``pgid`` 0 means: marked processes only."""

    def find() -> dict[int, int]:
        found = marked(needle)
        if box is not None:
            found.update(box_members(box))
        return found

    if box is not None:
        box.seal()
    _freeze_and_kill(find, pgid, leader)
    if box is not None:
        box.remove()


def kill_box(box: Box, leader: int = 0) -> None:
    """Kill every process in ``box`` (``leader``, if one of them, is left to its waiter to reap)."""
    box.seal()
    _freeze_and_kill(lambda: box_members(box), 0, leader)
    box.remove()


def _freeze_and_kill(find: Callable[[], dict[int, int]], pgid: int, leader: int) -> None:
    if pgid:
        send_signal(pgid, signal.SIGSTOP, group=True)
    seen: dict[int, int] = {}
    for _ in range(50):
        new = {pid: start for pid, start in find().items() if pid not in seen and pid != os.getpid()}
        if not new:
            break
        for pid in new:
            send_signal(pid, signal.SIGSTOP)
        seen.update(new)
    if pgid:
        send_signal(pgid, signal.SIGKILL, group=True)
    for pid in seen:
        send_signal(pid, signal.SIGKILL)
    seen.pop(leader, None)  # asyncio's child watcher (or Popen.wait) reaps the leader
    reap(seen, leader)


def reap(pending: dict[int, int], leader: int, wait: float = 1.0) -> None:
    """waitpid the killed processes that are (or become, as a subreaper) our zombie children."""
    me = os.getpid()
    deadline = time.monotonic() + wait
    while pending:
        for pid, start in list(pending.items()):
            info = proc_stat(pid)
            if info is None or info[2] != start:
                del pending[pid]
            elif info[1] != me:
                if info[0] == "Z" and info[1] not in pending and info[1] != leader:
                    del pending[pid]  # init's zombie (no subreaper); a dying parent's comes to us next
            elif info[0] == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                del pending[pid]
        if not pending or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def sweep(needle: bytes) -> int:
    """Kill every live process of the run marked with ``needle`` (``NAME=value``): by that variable, and in the
    run's boxes (its cgroups and rlimit marker, which ``env -i`` keeps); returns how many were found."""
    run = needle.decode(errors="replace")

    def find() -> dict[int, int]:
        found = {**marked(needle), **limit_marked(hard=run_marker(run))}
        for path in cgroups.run_cgroups(run):
            found.update(cgroup_members(path))
        return found

    found = find()
    if found:
        _freeze_and_kill(find, 0, 0)
    cgroups.remove_run(run)
    return len(found)


def reap_orphans() -> int:
    """Collect every exited child, adopted orphans included (as a subreaper the host inherits them)."""
    reaped = 0
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped += 1
