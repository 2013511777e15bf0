"""Whole trees the model had in its hands, walked by directory descriptors: removed (``rm -rf``) and aged (what a
build wrote, set below the build's start).

Every directory is opened beneath its parent's descriptor with ``O_NOFOLLOW`` and every name is handled relative to
its directory (``unlinkat``, ``utimensat``): a symbolic link is never followed out of the tree, whatever a process
swaps in meanwhile, and no path is resolved again for each entry. A directory's names are read once, before
anything in it changes. However deep the tree, the ageing holds at most ``DEPTH`` directories open and the removal
``WORKERS`` times ``_REMOVE_DEPTH``.

The removal runs ``WORKERS`` threads: where the file system gives a file's blocks back to the disk as it goes (ext4
mounted with ``discard``), every unlink waits for the disk (``blkdev_issue_discard``), and ``rm -rf``, which waits
for each in turn, took 74-87 s for a 40k-entry uv environment that eight threads remove in 3-4 s
(``benchmarks/teardown.py``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEPTH = 64  # directories held open at once by the ageing: what lies deeper is not aged
WORKERS = 8  # threads removing a tree (on a discarding disk: 4 took 1.5x, 16 no less than 8)
_REMOVE_DEPTH = 32  # a directory deeper than this is moved up to the top to be removed
_BATCH = 64  # files one worker unlinks in a row
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


def remove_tree(top: str | Path, *, workers: int = WORKERS) -> int:
    """``rm -rf top``, counting the entries that went: symbolic links are removed, never followed; a directory
    inside that its owner may not write or search is made so first (a Go module cache is read-only, and ``rm``
    would leave it); what cannot be removed is left, as ``shutil.rmtree(ignore_errors=True)`` leaves it.

    ``workers`` threads remove at once, each its own directories: a file system that discards a file's blocks as
    it goes (ext4 mounted with ``discard``) makes every unlink wait for the disk, and ``rm -rf`` waits for each in
    turn."""
    path = os.fspath(top)
    try:
        root = _open_dir(path, None)
    except NotADirectoryError:
        return _remove(os.unlink, path, None)
    if root is None:
        return 0
    try:
        count = _Removal(root, workers).run()
    finally:
        os.close(root)
    return count + _remove(os.rmdir, path, None)


@dataclass(eq=False)
class _Node:
    """A directory being emptied: open while anything beneath it is still to go."""

    fd: int
    parent: _Node | None
    name: str
    depth: int
    holds: int = 1  # what must be done before it can go: its listing, its batches of files, its subdirectories


@dataclass
class _Removal:
    """Directories to empty, on a stack the workers share (the newest first, so each works down one branch and
    few directories are open at once); a directory goes with the last thing beneath it."""

    root: int
    workers: int
    lock: threading.Condition = field(default_factory=threading.Condition)
    work: list[tuple[_Node, str | list[str]]] = field(default_factory=list)  # (parent, a subdirectory | files)
    count: int = 0
    moved: int = 0
    done: bool = False
    failure: BaseException | None = None

    def run(self) -> int:
        top = _Node(self.root, None, "", 0)
        self._visit(top)
        threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(max(1, self.workers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.failure is not None:
            raise self.failure
        return self.count

    def _worker(self) -> None:
        while True:
            with self.lock:
                while not self.work and not self.done:
                    self.lock.wait()
                if self.done:
                    return
                node, item = self.work.pop()
            try:
                if isinstance(item, list):
                    self._counted(sum(_remove(os.unlink, name, node.fd) for name in item))
                    self._release(node)
                else:
                    self._enter(node, item)
            except BaseException as exc:  # noqa: BLE001 - handed to run(), which raises it; the others stop
                with self.lock:
                    self.failure, self.done = self.failure or exc, True
                    self.lock.notify_all()
                return

    def _enter(self, parent: _Node, name: str) -> None:
        """The subdirectory ``name`` of ``parent``: opened and listed (its files and subdirectories become work;
        its removal releases the parent's hold on it), or moved up to the root when too deep to hold open, or
        unlinked when it is no directory, or left when it cannot be opened."""
        fd = None
        if parent.depth >= _REMOVE_DEPTH:
            with self.lock:
                self.moved += 1
                fresh = f".prime-ci-deep-{self.moved}"
            with contextlib.suppress(OSError):
                os.rename(name, fresh, src_dir_fd=parent.fd, dst_dir_fd=self.root)
                self._push(self._top(parent), [fresh])
        else:
            try:
                fd = _open_dir(name, parent.fd)
            except NotADirectoryError:  # no longer a directory: a file or a link was swapped in
                self._counted(_remove(os.unlink, name, parent.fd))
        if fd is None:
            self._release(parent)
        else:
            self._visit(_Node(fd, parent, name, parent.depth + 1))

    def _visit(self, node: _Node) -> None:
        """List one directory: its files go in batches, its subdirectories onto the stack; then its listing's
        hold is released."""
        files: list[str] = []
        subdirs: list[str] = []
        for entry in _entries(node.fd):
            try:
                (subdirs if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
            except OSError:
                files.append(entry.name)
        batches: list[str | list[str]] = [files[i:i + _BATCH] for i in range(0, len(files), _BATCH)]
        self._push(node, [*batches, *subdirs])
        self._release(node)

    def _push(self, node: _Node, items: Sequence[str | list[str]]) -> None:
        """Work beneath ``node``: a batch of files to unlink, or a subdirectory's name; each a hold on it."""
        with self.lock:
            node.holds += len(items)
            self.work.extend((node, item) for item in items)
            self.lock.notify(len(items))

    def _release(self, node: _Node | None) -> None:
        """One hold on ``node`` is done; an emptied directory goes, which releases its parent's hold on it."""
        while node is not None:
            with self.lock:
                node.holds -= 1
                if node.holds:
                    return
                if node.parent is None:
                    self.done = True
                    self.lock.notify_all()
                    return
            os.close(node.fd)
            self._counted(_remove(os.rmdir, node.name, node.parent.fd))
            node = node.parent

    def _counted(self, removed: int) -> None:
        with self.lock:
            self.count += removed

    @staticmethod
    def _top(node: _Node) -> _Node:
        while node.parent is not None:
            node = node.parent
        return node


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
