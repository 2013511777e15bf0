"""Whole trees the model had in its hands, walked by directory descriptors: removed (``rm -rf``).

Every directory is opened beneath its parent's descriptor with ``O_NOFOLLOW`` and every name is handled relative to
its directory (``unlinkat``): a symbolic link is never followed out of the tree, whatever a process
swaps in meanwhile, and no path is resolved again for each entry (``rm -rf`` resolves none either; the walk by full
paths this replaces took longer than ``rm -rf``). A directory's names are read once, before anything in it
changes. At most ``DEPTH`` directories are open at once, however deep the tree.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

DEPTH = 64  # directories held open at once: a deeper one is moved up to be removed
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_Frame = tuple[int, list[str]]  # an open directory, and the names of its subdirectories still to visit


def remove_tree(top: str | Path) -> int:
    """``rm -rf top``, counting the entries that went: symbolic links are removed, never followed; a directory
    inside that its owner may not write or search is made so first (a Go module cache is read-only, and ``rm``
    would leave it); what cannot be removed is left, as ``shutil.rmtree(ignore_errors=True)`` leaves it."""
    path = os.fspath(top)
    try:
        root = _open_dir(path, None)
    except NotADirectoryError:
        return _remove(os.unlink, path, None)
    if root is None:
        return 0
    try:
        count = _empty(root)
    finally:
        os.close(root)
    return count + _remove(os.rmdir, path, None)


def _empty(root: int) -> int:
    """Remove everything inside the directory open at ``root``; how many entries went."""
    count, subdirs = _sweep(root)
    stack: list[_Frame] = [(root, subdirs)]
    names: list[str] = []  # each directory's name in its parent, for the stack above the root
    moved = 0
    try:
        while stack:
            fd, pending = stack[-1]
            if not pending:
                stack.pop()
                if stack:  # emptied: now it goes
                    os.close(fd)
                    count += _remove(os.rmdir, names.pop(), stack[-1][0])
                continue
            name = pending.pop()
            if len(stack) > DEPTH:  # too deep to hold open: moved up beside the others, emptied from there
                moved += 1
                with contextlib.suppress(OSError):
                    os.rename(name, f".prime-ci-deep-{moved}", src_dir_fd=fd, dst_dir_fd=root)
                    stack[0][1].append(f".prime-ci-deep-{moved}")
                continue
            try:
                child = _open_dir(name, fd)
            except NotADirectoryError:  # no longer a directory: a file or a link was swapped in
                count += _remove(os.unlink, name, fd)
                continue
            if child is not None:
                swept, subdirs = _sweep(child)
                count += swept
                stack.append((child, subdirs))
                names.append(name)
    finally:
        for fd, _ in stack[1:]:
            os.close(fd)
    return count


def _sweep(fd: int) -> tuple[int, list[str]]:
    """Unlink every entry of one directory but its subdirectories: how many went, and the subdirectories."""
    count, subdirs = 0, []
    for entry in _entries(fd):
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            subdirs.append(entry.name)
        else:
            count += _remove(os.unlink, entry.name, fd)
    return count, subdirs


def _entries(fd: int) -> list[os.DirEntry[str]]:
    """The entries of the directory open at ``fd``, all read before any changes (none when it cannot be read)."""
    try:
        with os.scandir(fd) as entries:
            return list(entries)
    except OSError:
        return []


def _open_dir(name: str, parent: int | None) -> int | None:
    """The directory ``name`` opened without following a link (made readable and searchable first when its owner
    may not); None when it cannot be; NotADirectoryError for a file or a symbolic link."""
    for attempt in (1, 2):
        try:
            return os.open(name, _DIR, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):  # O_NOFOLLOW refuses a link with ELOOP
                raise NotADirectoryError(exc.errno, exc.strerror) from exc
            if exc.errno not in (errno.EACCES, errno.EPERM) or attempt == 2:
                return None
            _chmod_dir(name, parent)
    return None


def _chmod_dir(name: str, parent: int | None) -> None:
    """Let the owner read, write and search the directory ``name``: opened as a path (``O_PATH``, which needs no
    permission on it) without following a link, then changed through that descriptor, never through a link."""
    with contextlib.suppress(OSError, AttributeError):
        path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
        finally:
            os.close(path_fd)


def _remove(remove: Callable[..., None], name: str, parent: int | None) -> int:
    """1 when ``name`` went, else 0; inside the tree, a directory its owner may not write is made writable once."""
    for attempt in (1, 2):
        try:
            remove(name, dir_fd=parent)
            return 1
        except PermissionError:
            if parent is None or attempt == 2:
                return 0
            with contextlib.suppress(OSError):
                os.chmod(parent, stat.S_IMODE(os.fstat(parent).st_mode) | 0o700)
        except OSError:
            return 0
    return 0
