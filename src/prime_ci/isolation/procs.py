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
from collections.abc import Callable, Iterable
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
    return _members(None, hard=box.marker[1], soft=box.marker[0], dirs=box.cgroups())


def _members(needle: bytes | None, *, hard: int, soft: int | None = None, dirs: Iterable[Path] = ()) -> dict[int, int]:
    """pid -> start time of the live processes marked with ``needle`` in their environment, or with that
    RLIMIT_RTTIME marker (``soft`` None: any box of the run), or in one of the cgroups ``dirs``."""
    found = marked(needle) if needle is not None else {}
    found.update(limit_marked(hard=hard, soft=soft))
    for path in dirs:
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
        pids = [int(word) for word in (path / "cgroup.procs").read_text(encoding="utf-8").split()]
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
        return {**marked(needle), **(box_members(box) if box is not None else {})}

    _kill(find, pgid=pgid, leader=leader, box=box)


def kill_box(box: Box, leader: int = 0) -> None:
    """Kill every process in ``box`` (``leader``, if one of them, is left to its waiter to reap)."""
    _kill(lambda: box_members(box), leader=leader, box=box)


def _kill(find: Callable[[], dict[int, int]], *, pgid: int = 0, leader: int = 0, box: Box | None = None,
          run: str | None = None) -> int:
    """Seal ``box`` (no more forks), freeze the group ``pgid`` and what ``find`` finds (rescanning for forks),
    SIGKILL them all and reap them, then remove the cgroups: ``box``'s, or all of the run ``run``'s. Returns how
    many processes ``find`` found."""
    if box is not None:
        box.seal()
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
    found = len(seen)
    seen.pop(leader, None)  # asyncio's child watcher (or Popen.wait) reaps the leader
    reap(seen, leader)
    if box is not None:
        box.remove()
    if run is not None:
        cgroups.remove_run(run)
    return found


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
    """Kill every live process of the run marked with ``needle`` (``box.run_needle``): by that variable, and in
    the run's boxes (its cgroups and rlimit marker, which ``env -i`` keeps); returns how many were found."""
    run = needle.decode(errors="replace")
    return _kill(lambda: _members(needle, hard=run_marker(run), dirs=cgroups.run_cgroups(run)), run=run)


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
