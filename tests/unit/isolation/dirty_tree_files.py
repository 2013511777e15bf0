"""Untracked environments and build trees, as a job leaves them in REPO."""

from __future__ import annotations

from pathlib import Path


def plant_trees(repo: Path) -> None:
    """A venv under a name nobody ignores, node_modules, bytecode and tool caches, a build tree."""
    for rel in ("env311/pyvenv.cfg", "env311/lib/python3.11/site-packages/six.py", "node_modules/left-pad/index.js",
                "pkg/__pycache__/calc.cpython-311.pyc", ".pytest_cache/v/cache/nodeids", ".mypy_cache/3.11/x.json",
                ".tox/py311/bin/python", "build/lib/calc.py", "src/mylib.egg-info/PKG-INFO"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x\n")
