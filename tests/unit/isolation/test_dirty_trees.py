"""Issue 23 item 4: REPO's untracked environments and build trees (a venv, node_modules, caches) are not its
uncommitted changes, --include-dirty does not snapshot them, and result.json's dirty list is capped."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.isolation.worktree import create_worktree, dirty_paths
from prime_ci.testing import ScriptedServer, reply


def _trees(repo: Path) -> None:
    """A venv under a name nobody ignores, node_modules, bytecode and tool caches, a build tree."""
    for rel in ("env311/pyvenv.cfg", "env311/lib/python3.11/site-packages/six.py", "node_modules/left-pad/index.js",
                "pkg/__pycache__/calc.cpython-311.pyc", ".pytest_cache/v/cache/nodeids", ".mypy_cache/3.11/x.json",
                ".tox/py311/bin/python", "build/lib/calc.py", "src/mylib.egg-info/PKG-INFO"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x\n")


def test_environments_and_build_trees_are_not_uncommitted_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, ".gitignore": "", "build/keep.txt": "tracked\n"})
    _trees(repo)
    (repo / "notes.md").write_text("a real new file\n")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "build" / "keep.txt").write_text("a tracked file under build/ changed\n")
    assert sorted(dirty_paths(repo)) == ["build/keep.txt", "calc.py", "notes.md"]
    wt = create_worktree(str(repo), None, include_dirty=True)
    try:
        assert (wt.path / "notes.md").is_file() and "a + b" in (wt.path / "calc.py").read_text()
        assert "changed" in (wt.path / "build" / "keep.txt").read_text()
        for tree in ("env311", "node_modules", "pkg", ".pytest_cache", ".tox", "build/lib", "src"):
            assert not (wt.path / tree).exists(), f"{tree} was snapshotted"
    finally:
        wt.remove()


def test_the_dirty_list_is_capped_and_the_warning_leaves_trees_out(
    tmp_path: Path, server: ScriptedServer
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    _trees(repo)
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
