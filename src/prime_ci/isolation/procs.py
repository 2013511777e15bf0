"""Process cleanup: subreaper, environment-marker sweeps, freeze-then-kill of process trees.

Process groups alone miss ``setsid`` escapees. Every process prime-ci starts for a run carries a marker
variable in its environment (inherited by everything it spawns, readable in ``/proc/<pid>/environ``), so a
sweep can find and kill what is left, and as a subreaper the host inherits the orphans and reaps them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path


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


def send_signal(pid: int, sig: int, *, group: bool = False) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pgid: int, needle: bytes, leader: int) -> None:
    """Freeze the group and every process marked with ``needle`` (``NAME=value`` in its environment, rescanning
    for forks), SIGKILL them all, reap escapees. ``pgid`` 0 means: marked processes only."""
    if pgid:
        send_signal(pgid, signal.SIGSTOP, group=True)
    seen: dict[int, int] = {}
    for _ in range(50):
        new = {pid: start for pid, start in marked(needle).items() if pid not in seen}
        if not new:
            break
        for pid in new:
            send_signal(pid, signal.SIGSTOP)
        seen.update(new)
    if pgid:
        send_signal(pgid, signal.SIGKILL, group=True)
    for pid in seen:
        send_signal(pid, signal.SIGKILL)
    seen.pop(leader, None)  # asyncio's child watcher reaps the leader
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
    """Kill every live process marked with ``needle``; returns how many were found."""
    found = marked(needle)
    if found:
        kill_tree(0, needle, 0)
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
