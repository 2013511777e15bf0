"""Issue 23 item 4, a whole run: result.json's dirty list is capped and the warning leaves environments and build trees
out."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, reply
from unit.isolation.dirty_tree_files import plant_trees


def test_the_dirty_list_is_capped_and_the_warning_leaves_trees_out(
    tmp_path: Path, server: ScriptedServer
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    plant_trees(repo)
    for i in range(60):
        (repo / f"new_{i:02d}.txt").write_text("x\n")
    server.add(reply("nothing to do"))
    run = run_inproc(tmp_path, repo, server)
    assert run.code == 0, run.proc.stderr
    assert len(run.result["dirty"]) == 50 and run.result["dirty_count"] == 60
    assert all(p.startswith("new_") for p in run.result["dirty"])
    warning = next(line for line in run.proc.stderr.splitlines() if "uncommitted changes" in line)
    assert "(60 path(s)" in warning and "env311" not in warning and "node_modules" not in warning
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert "env311" in status, "REPO itself is untouched"
