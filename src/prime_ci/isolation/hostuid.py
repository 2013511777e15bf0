"""As root, the unprivileged host uid that sandboxed code runs as, and handing it what it must write.

A user namespace alone leaves a sandbox started by root with root's uid on the host: the kernel's permission
checks then let it read every root-only file that is not hidden and connect to every root-only socket. So when
prime-ci runs as root, the seccomp loader (the last step before bwrap) drops to ``uid()`` (the gid is the same
number, no supplementary groups) and bwrap builds an unprivileged user namespace; the host itself stays root and
writes the artifacts.

The default uid is ``DEFAULT_UID``: a number above the ranges distributions give users, services, systemd's
dynamic users (61184-65519), ``nobody`` (65534, which NFS also gives squashed files, and daemons run as) and the
ranges systemd-nspawn and ``/etc/subuid`` give containers, and below 2**31 (some tools keep uids in a signed int).
``PRIME_CI_SANDBOX_UID`` names another. A uid that a user or group of this host has, or that ``/etc/subuid``
delegates, is refused: it would share files with that user.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path

UID_VAR = "PRIME_CI_SANDBOX_UID"
DEFAULT_UID = 0x7000_0C1C  # 1879051292
_MAX_UID = 2**32 - 2  # (uid_t)-1 means "unchanged" to chown and setresuid
ID_TABLES = ("/etc/subuid", "/etc/subgid")  # the ranges delegated to users' containers (a seam for tests)


class UidUnavailable(Exception):
    """The unprivileged uid cannot be had here (the message says why, in one line)."""


def uid() -> int | None:
    """The host uid sandboxed code runs as: None unless prime-ci runs as root. Raises UidUnavailable when
    ``PRIME_CI_SANDBOX_UID`` is malformed or names a uid this host already uses."""
    if os.geteuid() != 0:
        return None
    raw = os.environ.get(UID_VAR, "").strip()
    if not raw:
        value = DEFAULT_UID
    elif not raw.isdigit() or not 0 < int(raw) <= _MAX_UID:
        raise UidUnavailable(f"{UID_VAR}={raw!r} is not a uid between 1 and {_MAX_UID}")
    else:
        value = int(raw)
    if (taken := _taken_by(value)) is not None:
        raise UidUnavailable(f"uid {value} is {taken} on this host (set {UID_VAR} to an unused uid)")
    return value


def _taken_by(value: int) -> str | None:
    with contextlib.suppress(KeyError):
        return f"user {pwd.getpwuid(value).pw_name!r}"
    with contextlib.suppress(KeyError):
        return f"group {grp.getgrgid(value).gr_name!r}"
    for table in ID_TABLES:
        with contextlib.suppress(OSError):
            for line in Path(table).read_text(encoding="utf-8").splitlines():
                name, _, rest = line.partition(":")
                start, _, count = rest.partition(":")
                if start.isdigit() and count.isdigit() and int(start) <= value < int(start) + int(count):
                    return f"delegated to {name!r} in {table}"
    return None


def give(owner: int, paths: Iterable[Path | str], *, tree: bool = False, gid: int | None = None) -> None:
    """Make ``owner`` (uid, and gid unless ``gid``) own ``paths`` (and, with ``tree``, everything under them,
    symlinks themselves and never followed). Raises OSError when this host will not let it (a uid outside a
    container's id map)."""
    group = owner if gid is None else gid
    for path in paths:
        os.lchown(path, owner, group)
        if tree and os.path.isdir(path) and not os.path.islink(path):
            for top, dirs, files in os.walk(path):
                for name in [*dirs, *files]:
                    _own(os.path.join(top, name), owner, group)


def _own(path: str, owner: int, group: int) -> None:
    """A file with more than one name is left as it is: the sandbox may have linked a host file into the tree
    (where ``fs.protected_hardlinks`` is off), and a checkout makes none."""
    info = os.lstat(path)
    if (info.st_uid, info.st_gid) == (owner, group) or (info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode)):
        return
    os.lchown(path, owner, group)


def let_in(owner: int, directory: Path | str) -> None:
    """Let ``owner`` (by its group) pass through ``directory`` (root's, private) to what it was given inside,
    without listing it; no one else gains anything."""
    os.chown(directory, -1, owner)
    os.chmod(directory, 0o710)
