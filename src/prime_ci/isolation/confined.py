"""Reading a file of an artifacts directory (OUT) that may have been crafted: never from outside it.

An OUT handed to ``export``, ``resume`` or ``report`` can come from elsewhere (a CI artifact, a shared
directory), and a symlink in it (the file, or a directory on the way to it) could make prime-ci copy a file only
the caller can read into a place others can read. ``read_in`` reads a regular file under ROOT and refuses, with
``ConfigError`` (exit 2, one line), a path that leads out of ROOT once its symlinks are followed, or that is not a
regular file (a FIFO would block the read, a device never ends). Symlinks that stay inside ROOT are followed. The
file is opened by walking the resolved path from ROOT one component at a time without following symlinks, so a
link swapped in after the check is refused too. A missing file is ``FileNotFoundError``, for the caller to word.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from prime_ci.errors import ConfigError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def confined(root: Path, path: Path, what: str) -> Path:
    """``path`` resolved, when it lies in ``root`` (resolved); else ``ConfigError`` naming where it leads."""
    base = root.resolve()
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise ConfigError(f"{what}: {path} cannot be followed ({exc}): refused") from None
    if not real.is_relative_to(base):
        raise ConfigError(f"{what}: {path} leads out of {root} (to {real}): refused")
    return real


def read_in(root: Path, path: Path, what: str) -> bytes:
    """The bytes of the regular file ``path`` inside ``root`` (see the module's docstring)."""
    real = confined(root, path, what)
    parts = real.relative_to(root.resolve()).parts
    if not parts:
        raise ConfigError(f"{what}: {path} is not a regular file: refused")
    fds: list[int] = []
    try:
        fds.append(os.open(root.resolve(), _DIR))
        for part in parts[:-1]:
            fds.append(os.open(part, _DIR, dir_fd=fds[-1]))
        fd = os.open(parts[-1], _FILE, dir_fd=fds[-1])
        fds.append(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{what}: {path} is not a regular file: refused")
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a file in the way, or a symlink put there since the check
            raise ConfigError(f"{what}: {path}: {exc.strerror} on the way to it: refused") from None
        raise ConfigError(f"{what}: {path} cannot be read: {exc.strerror or exc}") from None
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
