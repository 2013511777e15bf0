"""Undumpable host processes: what holds a credential closes its ``/proc/PID/environ``, ``mem`` and ``fd/`` to
other processes of its user. Standard library only and quick to import: a child host calls it first of all."""

from __future__ import annotations

import ctypes
import sys

PR_SET_DUMPABLE = 4


def make_undumpable() -> None:
    """Make this process's /proc/<pid>/environ, memory and descriptors unreadable to other processes of the same
    user (not to root: CAP_SYS_PTRACE passes). Cleared again by an exec, so each host process calls it itself."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
