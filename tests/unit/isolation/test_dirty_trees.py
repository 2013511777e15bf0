"""Issue 23 item 4: REPO's untracked environments and build trees (a venv, node_modules, caches) are not its
uncommitted changes, --include-dirty does not snapshot them, and result.json's dirty list is capped (the run:
tests/runs/isolation/test_dirty_trees_run.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import BUGGY, make_repo
from prime_ci.isolation.worktree import create_worktree, dirty_paths
from unit.isolation.dirty_tree_files import plant_trees


def test_environments_and_build_trees_are_not_uncommitted_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, ".gitignore": "", "build/keep.txt": "tracked\n"})
    plant_trees(repo)
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
