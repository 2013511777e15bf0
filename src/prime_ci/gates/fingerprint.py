"""The workspace fingerprint: unchanged since the last failing gate round means the gates are not rerun."""

from __future__ import annotations

import hashlib
import os
import stat

from prime_ci.isolation.worktree import Worktree

DEFAULT_EXCLUDES = (
    ".prime-ci", ".pytest_cache", ".mypy_cache", ".ruff_cache",
    ":(exclude,glob)**/__pycache__/**",
)


def _digest_untracked(root_fd: int, rel: bytes) -> bytes:
    """Content hash of one untracked file, opened beneath the worktree without following any symlink."""
    parts = rel.rstrip(b"/").split(b"/")
    opened: list[int] = []
    directory = root_fd
    try:
        dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        for part in parts[:-1]:
            directory = os.open(part, dir_flags, dir_fd=directory)
            opened.append(directory)
        st = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return b"link:" + os.fsencode(os.readlink(parts[-1], dir_fd=directory))
        if not stat.S_ISREG(st.st_mode):
            return b"mode:%o" % stat.S_IFMT(st.st_mode)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(parts[-1], flags, dir_fd=directory)
        digest = hashlib.sha256()
        with os.fdopen(fd, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        return b"file:" + digest.digest()
    except OSError as exc:  # vanished, or a path component swapped for a symlink
        return b"error:%d" % (exc.errno or 0)
    finally:
        for fd in opened:
            os.close(fd)


def workspace_fingerprint(wt: Worktree, exclude: list[str]) -> str:
    """sha256 over HEAD, status, the binary diff against HEAD and every untracked file's content."""
    specs = ["--", ".", *(p if p.startswith(":(") else f":(exclude){p}" for p in
             (*DEFAULT_EXCLUDES, *wt.excludes, *exclude))]
    digest = hashlib.sha256()
    head = wt.git(["rev-parse", "--verify", "--quiet", "HEAD"], check=False).stdout
    status = wt.git(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", *specs]).stdout
    diff = wt.git(["diff", "--binary", "--no-ext-diff", "--no-textconv", "HEAD", *specs]).stdout
    for label, blob in ((b"head", head), (b"status", status), (b"diff", diff)):
        digest.update(b"%s\0%d\0" % (label, len(blob)) + blob)
    untracked = sorted(entry[3:] for entry in status.split(b"\0") if entry.startswith(b"?? "))
    root_fd = os.open(wt.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for rel in untracked:
            digest.update(b"untracked\0" + rel + b"\0" + _digest_untracked(root_fd, rel) + b"\0")
    finally:
        os.close(root_fd)
    return digest.hexdigest()
