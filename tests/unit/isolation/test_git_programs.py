"""Issue 24 item 1: no host git call on REPO or on the worktree runs a program the repository names (filter and
process drivers, also from included files and under names holding ``=``, a submodule's own config, signing,
hooks)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from conftest import make_repo
from prime_ci.children.family import Family
from prime_ci.children.host import Host
from prime_ci.errors import ConfigError
from prime_ci.gates.fingerprint import workspace_fingerprint
from prime_ci.harness.branch import branch_tip, commit_state, push
from prime_ci.isolation.dirty import dirty_paths
from prime_ci.isolation.gitcall import git
from prime_ci.isolation.worktree import create_worktree

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def driver(tmp_path: Path) -> tuple[Path, Path]:
    """A program that records each run in a directory outside every repository, then passes its input on."""
    marks = tmp_path / "ran"
    marks.mkdir()
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\ntouch "{marks}/$1"\ncat\n')
    script.chmod(0o755)
    return script, marks


def stale(*paths: Path, when: int = 978307200) -> None:
    """Stat data that no longer matches the index: git must hash the files again (through their filter)."""
    for path in paths:
        os.utime(path, (when, when))


def hostile_repo(tmp_path: Path) -> tuple[Path, Path]:
    script, marks = driver(tmp_path)
    attrs = "* filter=evil\n*.md filter=a=b\ninc.txt filter=inc\ncond.txt filter=cond\n"
    repo = make_repo(tmp_path / "repo", {".gitattributes": attrs, "calc.py": "x = 1\n", "notes.md": "n\n",
                                         "inc.txt": "i\n", "cond.txt": "c\n"})
    (tmp_path / "included").write_text(f'[filter "inc"]\n\tclean = {script} include\n')
    (tmp_path / "conditional").write_text(f'[filter "cond"]\n\tclean = {script} includeif\n')
    config = {"filter.evil.process": f"{script} process", "filter.evil.clean": f"{script} clean",
              "filter.evil.smudge": f"{script} smudge", "filter.a=b.clean": f"{script} equals",
              "include.path": str(tmp_path / "included"),
              f"includeIf.gitdir:{repo}/.git.path": str(tmp_path / "conditional"),
              "core.fsmonitor": f"{script} fsmonitor"}
    for key, value in config.items():
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    for hook in ("post-checkout", "pre-commit", "reference-transaction"):
        (repo / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/hook-{hook}\n")
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    return repo, marks


def test_the_dirty_check_snapshot_and_diff_run_none_of_repos_drivers(tmp_path: Path) -> None:
    repo, marks = hostile_repo(tmp_path)
    # the user's own git would run each of them here: the repository is armed
    stale(*(repo / name for name in ("calc.py", "notes.md", "inc.txt", "cond.txt")))
    armed = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, check=False)
    assert {"process", "equals", "include", "includeif"} <= {p.name for p in marks.iterdir()}, armed.stderr
    for mark in marks.iterdir():
        mark.unlink()
    stale(*(repo / name for name in ("calc.py", "notes.md", "inc.txt", "cond.txt")), when=1009843200)
    (repo / "new.txt").write_text("new\n")
    assert dirty_paths(repo) == ["new.txt"]
    wt = create_worktree(str(repo), None, include_dirty=True)
    try:
        assert (wt.path / "new.txt").read_text() == "new\n" and (wt.path / "calc.py").read_text() == "x = 1\n"
        (wt.path / "calc.py").write_text("x = 2\n")
        workspace_fingerprint(wt, [])
        patch, changed = wt.diff()
        assert changed == ["calc.py"] and "+x = 2" in patch
    finally:
        wt.remove()
    assert sorted(p.name for p in marks.iterdir()) == [], "the host ran a program REPO names"


def test_a_submodule_gitdir_planted_in_the_worktree_is_never_entered(tmp_path: Path) -> None:
    """A gitlink in the base commit and a ``.git`` file the kernel writes next to it: status and diff would run
    ``git status`` inside, with that directory's config (its filter) — on the host."""
    script, marks = driver(tmp_path)
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"160000,{head},sm"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "gitlink"], cwd=repo, check=True)
    evil = make_repo(tmp_path / "evil", {".gitattributes": "* filter=x\n", "f.txt": "f\n"})
    subprocess.run(["git", "config", "filter.x.clean", f"{script} submodule"], cwd=evil, check=True)
    wt = create_worktree(str(repo), None)
    try:
        sm = wt.path / "sm"
        sm.mkdir(exist_ok=True)
        for name in (".gitattributes", "f.txt"):
            (sm / name).write_bytes((evil / name).read_bytes())
        (sm / ".git").write_text(f"gitdir: {evil / '.git'}\n")
        stale(sm / "f.txt", sm / ".gitattributes")
        (wt.path / "calc.py").write_text("x = 2\n")
        workspace_fingerprint(wt, [])
        assert "calc.py" in wt.diff()[1]
        wt.untracked()
    finally:
        wt.remove()
    assert not list(marks.iterdir()), "the host entered a planted submodule and ran its filter"


def test_a_commit_in_a_repository_asking_for_signing_and_hooks_runs_neither(tmp_path: Path) -> None:
    """What the child host does in a child's worktree (whose ``.git`` the child can repoint): commit."""
    script, marks = driver(tmp_path)
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    for key, value in {"commit.gpgSign": "true", "gpg.program": str(script)}.items():
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    for hook in ("pre-commit", "commit-msg", "post-commit"):
        (repo / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/hook-{hook}\n")
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    (repo / "calc.py").write_text("x = 2\n")
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t"}
    git(["commit", "-qam", "change"], cwd=repo, env=identity)
    assert not list(marks.iterdir()), "the host ran REPO's signing program or hook"


def test_the_harness_push_from_repo_runs_neither_its_receive_pack_nor_its_proxy(tmp_path: Path) -> None:
    """A remote's ``receivepack``/``uploadpack`` and ``core.gitProxy``: the first value wins over a ``-c``."""
    marks = tmp_path / "ran"
    marks.mkdir()
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\ntouch "{marks}/$1"\nexit 1\n')
    script.chmod(0o755)
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    for key, value in {"remote.origin.url": str(remote), "remote.origin.receivepack": f"{script} receivepack",
                       "remote.origin.uploadpack": f"{script} uploadpack",
                       "core.gitProxy": str(script)}.items():
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    state = tmp_path / "state"
    (state / "memories").mkdir(parents=True)
    (state / "memories" / "a.md").write_text("a\n")
    commit = commit_state(repo, "prime-ci/harness", state, {}, "state")
    push(repo, "prime-ci/harness")
    assert branch_tip(remote, "prime-ci/harness") == commit
    git(["fetch", "--quiet", "origin", "prime-ci/harness"], cwd=repo)
    proxied = git(["ls-remote", "git://127.0.0.1:1/x"], cwd=repo, check=False)  # loopback, nothing listens
    assert proxied.returncode != 0 and b"refused" in proxied.stderr.lower(), proxied.stderr
    assert not list(marks.iterdir()), "the host ran a transport program REPO's config names"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the repository to another user")
def test_a_repository_owned_by_another_user_runs_none_of_its_drivers(tmp_path: Path) -> None:
    """As root (CI), REPO belonging to uid 65534: the dirty check reads its config (safe.directory) but runs
    nothing it names; the clone itself is refused with git's reason."""
    repo, marks = hostile_repo(tmp_path)
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 65534, 65534)
    stale(repo / "calc.py", repo / "notes.md")
    (repo / "new.txt").write_text("new\n")
    assert dirty_paths(repo) == ["new.txt"]
    with pytest.raises(ConfigError, match="dubious ownership"):
        create_worktree(str(repo), None, include_dirty=True)
    assert not list(marks.iterdir()), "root ran a program another user's repository names"


def test_a_childs_commit_goes_to_its_branch_whatever_its_dot_git_file_says(tmp_path: Path) -> None:
    """The child host commits an isolated child's work through the git dir the family made, never through the
    checkout's ``.git`` file, which the child can point at a git dir (and config) of its own."""
    script, marks = driver(tmp_path)
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    wt = create_worktree(str(repo), None)
    try:
        family = Family.__new__(Family)
        family.worktree = wt
        path, branch, git_dir = family._isolated_worktree("left", "c1")
        planted = make_repo(tmp_path / "planted", {".gitattributes": "* filter=x\n", "calc.py": "x = 1\n"})
        subprocess.run(["git", "config", "filter.x.clean", f"{script} planted"], cwd=planted, check=True)
        (path / ".git").write_text(f"gitdir: {planted / '.git'}\n")
        (path / "calc.py").write_text("x = 2\n")
        host = Host.__new__(Host)
        host.spec = {"branch": branch, "cwd": str(path), "git_dir": str(git_dir), "name": "left"}
        asyncio.run(host.commit_branch())
        shown = git(["show", f"{branch}:calc.py"], git_dir=wt.git_dir).stdout
        assert shown == b"x = 2\n", "the child's work did not reach its branch"
    finally:
        wt.remove()
    assert not list(marks.iterdir()), "the child host used the git dir the child planted"
