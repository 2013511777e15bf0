"""--gate-timeout: the timeout of every gate whose [[gate]] table does not set its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_ci.engine.config import RunConfig
from prime_ci.engine.prepare import load_gates
from prime_ci.errors import ConfigError
from prime_ci.isolation.worktree import Worktree


def _worktree(path: Path) -> Worktree:
    (path / "gates.toml").write_text('[[gate]]\nname = "own"\ncommand = "true"\ntimeout = "90s"\n'
                                     '[[gate]]\nname = "plain"\ncommand = "true"\n')
    return Worktree(path=path, git_dir=path / ".git", base_commit="0" * 40, root=path, source=str(path))


def test_gate_timeout_applies_where_no_table_sets_one(tmp_path: Path) -> None:
    wt = _worktree(tmp_path)
    cfg = RunConfig(task="t", gate=["pytest -q"], gates_file=["gates.toml"], gate_timeout="20m")
    assert {s.name: s.timeout for s in load_gates(cfg, wt)} == {"pytest": 1200, "own": 90, "plain": 1200}
    default = RunConfig(task="t", gate=["pytest -q"], gates_file=["gates.toml"])
    assert {s.name: s.timeout for s in load_gates(default, wt)} == {"pytest": 600, "own": 90, "plain": 600}
    with pytest.raises(ConfigError, match="--gate-timeout"):
        RunConfig(task="t", gate_timeout="soon")
