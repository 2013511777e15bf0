"""Whole trees the model had in its hands, walked by directory descriptors: removed (``rm -rf``) and aged (what a
build wrote, set below the build's start).

Every directory is opened beneath its parent's descriptor with ``O_NOFOLLOW`` and every name is handled relative to
its directory (``unlinkat``, ``utimensat``): a symbolic link is never followed out of the tree, whatever a process
swaps in meanwhile, and no path is resolved again for each entry (``rm -rf`` resolves none either; the walk by full
paths this replaces took longer than ``rm -rf``). A directory's names are read once, before anything in it
changes. At most ``DEPTH`` directories are open at once, however deep the tree.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DEPTH = 64  # directories held open at once: a deeper one is moved up to be removed, and is not aged
SECOND_NS = 10**9
CLOCK_LAG_NS = 50_000_000  # more than a file system's clock lags the system's (a tick: 10 ms at HZ=100)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_Frame = tuple[int, list[str]]  # an open directory, and the names of its subdirectories still to visit


def fs_now_ns(directory: Path) -> int:
    """The file system's clock, now: the change time of a new file in ``directory`` (the kernel stamps files from
    its own coarse clock, which may lag ``time.time_ns()``); every file written from now on carries a later one.
    When no file can be made there (a full disk), the system clock a little earlier: a source written just before
    the build may then be aged with its outputs, which is harmless (the build read it)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".clock-", dir=directory)
    except OSError:
        return time.time_ns() - CLOCK_LAG_NS
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        os.unlink(name)


def below(started_ns: int) -> int:
    """What a build's outputs are aged to: the whole second before the build started. A source written after the
    start is newer even to a tool that compares whole seconds (the distutils of setuptools 65.5, make where the
    file system keeps whole seconds)."""
    return (started_ns // SECOND_NS - 1) * SECOND_NS


def age_written(top: Path, since_ns: int, to_ns: int) -> int:
    """Every regular file beneath ``top`` whose status changed at or after ``since_ns`` (written, renamed in, or
    copied with an older mtime kept: its change time says so) and whose mtime is later than ``to_ns`` gets
    ``to_ns`` as its mtime, its access time kept; how many. Symbolic links and directories are left as they are,
    and so is what lies deeper than ``DEPTH``."""
    try:
        root = os.open(top, _DIR)
    except OSError:
        return 0
    subdirs: list[str] = []
    stack: list[_Frame] = [(root, subdirs)]
    try:
        aged = _age_in(root, since_ns, to_ns, subdirs)
        while stack:
            fd, pending = stack[-1]
            if not pending or len(stack) > DEPTH:
                os.close(stack.pop()[0])
                continue
            try:
                child = os.open(pending.pop(), _DIR, dir_fd=fd)
            except OSError:
                continue
            subdirs = []
            stack.append((child, subdirs))  # on the stack before anything else: closed whatever happens
            aged += _age_in(child, since_ns, to_ns, subdirs)
        return aged
    finally:
        for fd, _ in stack:
            os.close(fd)


def _age_in(fd: int, since_ns: int, to_ns: int, subdirs: list[str]) -> int:
    """Age the files of one directory (how many), and list its subdirectories in ``subdirs``."""
    aged = 0
    for entry in _entries(fd):
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_ctime_ns >= since_ns and info.st_mtime_ns > to_ns:
                os.utime(entry.name, ns=(info.st_atime_ns, to_ns), dir_fd=fd, follow_symlinks=False)
                aged += 1
    return aged


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
