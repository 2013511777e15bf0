"""The session log's single-writer lock: an exclusive ``flock`` on ``<log>.lock`` whose owner record (pid, its
start time, host) names the holder when another writer is refused."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
from pathlib import Path

from prime_ci.errors import PersistenceError


def process_start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat``: tells a live owner from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()
    return fields[19].decode() if len(fields) > 19 else None


class WriterLock:
    """Exclusive ``flock`` on ``<log>.lock``; the owner record in the file only names the holder in errors."""

    def __init__(self, log_path: Path) -> None:
        self.path = log_path.with_name(log_path.name + ".lock")
        # the holder removes the file when it is done (a finished run leaves no lock among its artifacts): a
        # lock taken on a file that was removed meanwhile is taken again on the path's current file
        while True:
            self.fd = self._take(log_path)
            try:
                same = os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(self.fd)
        me = {"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "host": socket.gethostname()}
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(me).encode(), 0)
        except OSError as exc:
            self.release()
            raise PersistenceError(f"cannot write lock file {self.path}: {exc.strerror}") from exc

    def _take(self, log_path: Path) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise PersistenceError(f"cannot open lock file {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = _lock_owner(fd)
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise PersistenceError(f"cannot lock {self.path}: {exc.strerror}") from exc
            raise PersistenceError(f"session log {log_path} is locked by {owner}") from None
        return fd

    def release(self, remove: bool = False) -> None:
        """Drop the lock; ``remove``: the writer is done, so the file goes first (while still held)."""
        if self.fd >= 0:
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            os.close(self.fd)  # drops the flock
            self.fd = -1


def _lock_owner(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0))
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its lock file names no owner yet)"
    if info.get("host") != socket.gethostname():
        return f"pid {pid} on host {info.get('host')}"
    if process_start_time(pid) != info.get("start_time"):
        return f"pid {pid} (no longer running: a process that inherited its lock still holds it)"
    return f"pid {pid}"
