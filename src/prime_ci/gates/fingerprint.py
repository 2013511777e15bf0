"""The workspace fingerprint: unchanged since the last failing gate round means the gates are not rerun.

It covers what the gates read: tracked and untracked files, and the ignored files that can steer a test run
(``protect.watched``: a rebuilt extension module, a planted conftest.py), which the patch never shows."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence

from prime_ci.gates.protect import BUILD_DIRS, watched
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


def _pathspecs(wt: Worktree, exclude: Sequence[str]) -> list[str]:
    return ["--", ".", *(p if p.startswith(":(") else f":(exclude){p}" for p in
                         (*DEFAULT_EXCLUDES, *wt.excludes, *exclude))]


def _digests(wt: Worktree, names: list[bytes]) -> dict[str, bytes]:
    root_fd = os.open(wt.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return {rel.decode(errors="surrogateescape"): _digest_untracked(root_fd, rel) for rel in names}
    finally:
        os.close(root_fd)


def watched_ignored(wt: Worktree, exclude: Sequence[str] = ()) -> dict[str, bytes]:
    """Content digests of the ignored files that can steer a test run (by the .gitignore as it is now): what
    the patch never shows, though tests may import it. Content, not size and mtime, which a cell can forge."""
    specs = _pathspecs(wt, [*exclude, *(d.rstrip("/") for d in BUILD_DIRS)])
    out = wt.git(["ls-files", "-z", "--others", "--ignored", "--exclude-standard", *specs]).stdout
    return _digests(wt, [raw for raw in out.split(b"\0") if raw and watched(raw.decode(errors="surrogateescape"))])


def workspace_fingerprint(wt: Worktree, exclude: list[str]) -> str:
    """sha256 over HEAD, status, the binary diff against HEAD, every untracked file's content and every watched
    ignored file's content."""
    specs = _pathspecs(wt, exclude)
    digest = hashlib.sha256()
    head = wt.git(["rev-parse", "--verify", "--quiet", "HEAD"], check=False).stdout
    status = wt.git(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames",
                     "--ignore-submodules=dirty", *specs]).stdout
    diff = wt.git(["diff", "--binary", "--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty", "HEAD",
                   *specs]).stdout
    for label, blob in ((b"head", head), (b"status", status), (b"diff", diff)):
        digest.update(b"%s\0%d\0" % (label, len(blob)) + blob)
    untracked = sorted(entry[3:] for entry in status.split(b"\0") if entry.startswith(b"?? "))
    for rel, content in sorted(_digests(wt, untracked).items()):
        digest.update(b"untracked\0" + os.fsencode(rel) + b"\0" + content + b"\0")
    for rel, content in sorted(watched_ignored(wt, exclude).items()):
        digest.update(b"ignored\0" + os.fsencode(rel) + b"\0" + content + b"\0")
    return digest.hexdigest()
