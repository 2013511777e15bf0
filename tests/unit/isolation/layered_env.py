"""A run directory with its project environment, as the gates' start-up hook sees it (for the bytecode tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from prime_ci.isolation import projenv
from prime_ci.isolation.project_layer import BYTECODE


def env_python(tmp_path: Path, python: str = sys.executable) -> tuple[Path, Path]:
    """A run directory with its environment (layered on ``python``: prime-ci's own by default) and a worktree
    module."""
    run = tmp_path / "run"
    env = projenv.create(run / "env", projenv.probe(python), None)
    (run / "work").mkdir()
    (run / "work" / "inwork.py").write_text("VALUE = 1\n")
    return env.python, run


def trust(run: Path, root: Path) -> None:
    """Add ``root`` to the trusted roots the environment's hook reads."""
    listing = next((run / "env" / "lib").glob(f"python*/site-packages/{BYTECODE}"))
    listing.write_bytes(listing.read_bytes() + b"\0T" + os.fsencode(root))
