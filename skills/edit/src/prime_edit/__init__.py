"""Exact-match file edits with clear errors (prime-ci built-in skill ``edit``)."""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path

__all__ = ["EditError", "run"]


class EditError(ValueError):
    """The edit was refused; the file is unchanged."""


def _lines_of(text: str, old: str) -> list[int]:
    lines = []
    start = text.find(old)
    while start >= 0:
        lines.append(text.count("\n", 0, start) + 1)
        start = text.find(old, start + len(old))
    return lines


def _closest(text: str, old: str) -> str:
    first = next((line for line in old.splitlines() if line.strip()), old)
    candidates = text.splitlines()
    close = difflib.get_close_matches(first, candidates, n=1, cutoff=0.6)
    if not close:
        close = [c for c in candidates if first.strip() and first.strip() in c][:1]
    if not close:
        return ""
    number = candidates.index(close[0]) + 1
    return f"; closest line {number}: {close[0]!r}"


def run(path: str | os.PathLike[str], old: str, new: str, count: int = 1) -> str:
    """Replace ``old`` with ``new`` in ``path`` when ``old`` occurs exactly ``count`` times."""
    target = Path(path)
    if not isinstance(count, int) or count < 1:
        raise EditError(f"count must be a positive integer, got {count!r}")
    if not old:
        raise EditError("old text is empty: give the exact text to replace")
    if old == new:
        raise EditError("old and new text are identical: nothing to change")
    if target.is_dir():
        raise EditError(f"{target} is a directory, not a file")
    if not target.is_file():
        raise FileNotFoundError(f"{target}: no such file (to create a file, write it directly)")
    with open(target, encoding="utf-8", newline="") as fh:
        text = fh.read()
    found = _lines_of(text, old)
    if not found:
        raise EditError(f"{target}: old text not found (it must match exactly, whitespace included)"
                        f"{_closest(text, old)}")
    if len(found) != count:
        where = ", ".join(str(n) for n in found[:20])
        hint = "add surrounding lines to old to make it unique" if count == 1 else f"expected {count}"
        raise EditError(f"{target}: old text found {len(found)} times (lines {where}), expected {count}: {hint}"
                        + ("" if count > 1 else f", or pass count={len(found)} to replace all"))
    updated = text.replace(old, new)
    mode = target.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(updated)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    lines = ", ".join(str(n) for n in found)
    return f"edited {target}: replaced {count} occurrence{'s' if count > 1 else ''} (line {lines})"
