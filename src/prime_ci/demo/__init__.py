"""The bundled demo: a tiny repository with a failing test and a recorded session that fixes it."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from prime_ci.isolation.worktree import commit_directory

TASK = "The test suite of this repository fails. Find the bug in calc.py and fix it; keep the tests as they are."


def demo_flags(out: Path | None) -> tuple[dict[str, Any], Callable[[], None]]:
    """A fresh git repo made from the bundled files, and the flags that run the demo on it."""
    root = Path(tempfile.mkdtemp(prefix="prime-ci-demo-"))
    repo = root / "calc"
    bundle = resources.files("prime_ci") / "demo"
    with resources.as_file(bundle / "repo") as src:
        commit_directory(src, repo, "calc: initial version")
    with resources.as_file(bundle / "session.jsonl") as session:
        shutil.copy(session, root / "session.jsonl")
    flags: dict[str, Any] = {
        "repo": str(repo),
        "task": TASK,
        "model": f"replay:{root / 'session.jsonl'}",
        "gate": ["python -m pytest -q"],
        "max_wall": "5m",
        "max_turns": 12,
        # the bundled project's interpreter is prime-ci's own (pytest is a dependency): the demo works from
        # an environment that is not activated too
        "python": sys.executable,
    }
    if out is not None:
        flags["out"] = out
    return flags, lambda: shutil.rmtree(root, ignore_errors=True)
