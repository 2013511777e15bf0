"""Issue 24 item 4, nightly tier: for generated file names and ignore patterns spread over every ignore source
(nested ``.gitignore``, ``.git/info/exclude``, the user's ``core.excludesFile``), the ``--include-dirty``
snapshot holds exactly what the user's ``git status`` calls untracked, and nothing it shows as ``!!``."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import make_repo
from prime_ci.isolation.worktree import create_worktree

pytest.importorskip("hypothesis", reason="hypothesis: the nightly tier installs requirements-fuzz.lock")
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.nightly

PARTS = st.sampled_from(["a", "b", "x.env", "secret", "c d", "é", "[1]", "*q", "#h", "!n", "build", "log.log"])
NAMES = st.lists(st.lists(PARTS, min_size=1, max_size=3).map("/".join), min_size=1, max_size=8, unique=True)
PATTERNS = st.lists(st.sampled_from(["*.env", "secret", "/a", "b/", "*.log", "c d", "é/*", "\\[1]", "\\#h",
                                     "!x.env", "**/q*", "a/**"]), max_size=3)


def _status(repo: Path, env: dict[str, str]) -> tuple[set[bytes], set[bytes]]:
    out = subprocess.run(["git", "status", "--porcelain", "-z", "--ignored", "--untracked-files=all"], cwd=repo,
                         env=env, capture_output=True, check=True).stdout
    items = [item for item in out.split(b"\0") if item]
    return {i[3:] for i in items if i.startswith(b"??")}, {i[3:] for i in items if i.startswith(b"!!")}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=NAMES, nested=PATTERNS, info=PATTERNS, user=PATTERNS)
# found by this fuzz: .git/info/exclude re-includes what the user's excludesFile ignores
@example(names=["x.env"], nested=[], info=["!x.env"], user=["*.env"])
def test_the_snapshot_is_what_status_calls_untracked(names: list[str], nested: list[str], info: list[str],
                                                     user: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = root / "home"
        home.mkdir()
        (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/ignores\n")
        (home / "ignores").write_text("".join(f"{p}\n" for p in user))
        env = {"PATH": os.environ["PATH"], "HOME": str(home)}
        repo = make_repo(root / "repo", {"tracked.txt": "t\n", "sub/.gitignore": "".join(f"{p}\n" for p in nested)})
        (repo / ".git" / "info" / "exclude").write_text("".join(f"{p}\n" for p in info))
        for name in names:
            path = repo / "sub" / name
            if any(parent.is_file() for parent in path.parents):
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_dir():
                path.write_text("x\n")
        untracked, ignored = _status(repo, env)
        untracked = {p for p in untracked if b"build" not in p.split(b"/")[:-1]}  # files under a build tree
        saved = os.environ.copy()
        os.environ.clear()
        os.environ.update(env)
        try:
            wt = create_worktree(str(repo), None, include_dirty=True)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        try:
            tree = subprocess.run(["git", f"--git-dir={wt.git_dir}", "ls-tree", "-r", "-z", "--name-only",
                                   wt.base_commit], capture_output=True, check=True).stdout
            files = {f for f in tree.split(b"\0") if f} - {b"tracked.txt", b"sub/.gitignore"}
        finally:
            wt.remove()
        assert files == untracked, (files, untracked)
        assert not files & ignored
