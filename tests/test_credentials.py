"""Issue 15, through the CLI: a missing key is found before anything is cloned, and said with the variable's name,
exit 2 (the rest in process: tests/runs/model/test_credential_runs.py, tests/unit/model/test_credentials_table.py)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import run_cli


def test_no_anthropic_key_exits_2_before_cloning(tmp_path: Path) -> None:
    # REPO does not even exist: the key check comes before any clone, so it is what the user hears about
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = run_cli(["run", str(tmp_path / "no-such-repo"), "--task", "x", "--model", "anthropic/claude-sonnet-4-5",
                    "--out", str(tmp_path / "out")], cwd=tmp_path, env=env | {"ANTHROPIC_API_KEY": ""})
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "ANTHROPIC_API_KEY" in last and "no-such-repo" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


