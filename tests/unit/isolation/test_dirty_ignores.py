"""Issue 24 item 4: ``--include-dirty`` honours every ignore source the user's git honours: a file
``git status --ignored`` shows as ``!!`` is neither listed as dirty nor carried into the snapshot."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo
from prime_ci.isolation.dirty import dirty_paths
from prime_ci.isolation.worktree import create_worktree

SOURCES = ("global-excludesfile", "xdg-default", "home-default", "info-exclude", "nested-gitignore",
           "repo-excludesfile")


def arm(source: str, repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``secret.env`` (and ``sub/secret.env``) ignored through ``source`` alone."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_SYSTEM"):
        monkeypatch.delenv(name, raising=False)
    pattern = "secret.env\n"
    if source == "global-excludesfile":
        (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/my-ignores\n")
        (home / "my-ignores").write_text(pattern)
        # git's default file no longer applies once core.excludesFile names another
        (home / ".config" / "git").mkdir(parents=True)
        (home / ".config" / "git" / "ignore").write_text("shown.txt\n")
    elif source == "xdg-default":
        xdg = home / "xdg"
        monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
        (xdg / "git").mkdir(parents=True)
        (xdg / "git" / "ignore").write_text(pattern)
    elif source == "home-default":
        (home / ".config" / "git").mkdir(parents=True)
        (home / ".config" / "git" / "ignore").write_text(pattern)
        (repo / ".git" / "info" / "exclude").write_text("other.log\n")  # both apply, neither replaces the other
    elif source == "info-exclude":
        (repo / ".git" / "info" / "exclude").write_text(pattern)
    elif source == "nested-gitignore":
        (repo / "sub" / ".gitignore").write_text(pattern)
        (repo / ".gitignore").write_text("/secret.env\n")
    elif source == "repo-excludesfile":
        (repo / "ignores.txt").write_text(pattern)
        subprocess.run(["git", "config", "core.excludesFile", "ignores.txt"], cwd=repo, check=True)


@pytest.mark.parametrize("source", SOURCES)
def test_a_file_only_one_ignore_source_ignores_stays_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          source: str) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "sub/keep.txt": "k\n"})
    home = tmp_path / "home"
    home.mkdir()
    arm(source, repo, home, monkeypatch)
    for rel in ("secret.env", "sub/secret.env", "notes.md", "shown.txt", "other.log"):
        (repo / rel).write_text("TOKEN=abc\n" if "secret" in rel else "x\n")
    ignored = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=repo,
                             capture_output=True, text=True, check=True).stdout
    assert "!! secret.env" in ignored and "!! sub/secret.env" in ignored, ignored  # as the user's git sees it
    expected = sorted(line[3:] for line in ignored.splitlines() if not line.startswith("!!"))
    assert sorted(dirty_paths(repo)) == expected, ignored
    assert "notes.md" in expected
    wt = create_worktree(str(repo), None, include_dirty=True)
    try:
        assert not (wt.path / "secret.env").exists() and not (wt.path / "sub" / "secret.env").exists()
        assert all((wt.path / rel).is_file() for rel in expected)
        shown = subprocess.run(["git", f"--git-dir={wt.git_dir}", "ls-tree", "-r", "--name-only", wt.base_commit],
                               capture_output=True, text=True, check=True).stdout
        assert "secret.env" not in shown
    finally:
        wt.remove()


def test_names_that_are_not_utf8_are_snapshotted_as_they_are(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    name = b"caf\xe9 *[x].txt"
    (repo / os.fsdecode(name)).write_bytes(b"latin-1 name\n")
    (repo / "ignored.log").write_text("x\n")
    (repo / ".git" / "info" / "exclude").write_text("*.log\n")
    wt = create_worktree(str(repo), None, include_dirty=True)
    try:
        assert (wt.path / os.fsdecode(name)).read_bytes() == b"latin-1 name\n"
        assert not (wt.path / "ignored.log").exists()
    finally:
        wt.remove()


def test_the_dirty_check_reads_repos_own_files_whatever_core_worktree_says(tmp_path: Path) -> None:
    """The snapshot is taken from REPO's directory, so the list it is built from must be too."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "host-file.txt").write_text("not REPO's\n")
    subprocess.run(["git", "config", "core.worktree", str(elsewhere)], cwd=repo, check=True)
    (repo / "new.txt").write_text("new\n")
    assert dirty_paths(repo) == ["new.txt"]
    wt = create_worktree(str(repo), None, include_dirty=True)
    try:
        assert (wt.path / "new.txt").is_file() and not (wt.path / "host-file.txt").exists()
    finally:
        wt.remove()
