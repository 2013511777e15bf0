"""Regex search over a repository tree (prime-ci built-in skill ``search``)."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path, PurePosixPath

__all__ = ["Matches", "run"]

MAX_FILE_BYTES = 5_000_000
SKIP_DIRS = frozenset({".git"})


class Matches(list[str]):
    """``file:line: text`` strings; printed one per line."""

    truncated: bool = False

    def __repr__(self) -> str:
        more = "\n[more matches not shown: raise max_results or narrow the pattern]" if self.truncated else ""
        return ("\n".join(self) if self else "(no matches)") + more

    __str__ = __repr__


def _wanted(rel: str, glob: str | None) -> bool:
    if glob is None:
        return True
    return fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(PurePosixPath(rel).name, glob) or \
        PurePosixPath(rel).match(glob)


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        found.extend(Path(dirpath, f) for f in sorted(filenames))
    return found


def run(pattern: str, path: str | os.PathLike[str] = ".", glob: str | None = None,
        max_results: int = 100) -> Matches:
    """Lines matching ``pattern`` under ``path``, as ``file:line: text``."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or directory")
    real_root = root.resolve() if root.is_dir() else root.resolve().parent
    results = Matches()
    for file in _files(root):
        rel = file.relative_to(root).as_posix() if root.is_dir() else file.name
        if not _wanted(rel, glob):
            continue
        if file.is_symlink() and not file.resolve().is_relative_to(real_root):
            continue
        try:
            if not file.is_file() or file.stat().st_size > MAX_FILE_BYTES:
                continue
            data = file.read_bytes()
        except OSError:
            continue  # unreadable or vanished while walking: not a match
        if b"\0" in data[:8192]:
            continue
        shown = str(file) if root.is_file() else str(PurePosixPath(root.as_posix()) / rel)
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if regex.search(line):
                if len(results) >= max_results:
                    results.truncated = True
                    return results
                text = line if len(line) <= 300 else line[:299] + "…"
                results.append(f"{shown}:{number}: {text}")
    return results
