"""Harness state on a git branch of a real repository: commit without checkout, load, propose, push."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import make_repo, repo_state
from prime_ci.harness.branch import (
    branch_tip,
    commit_state,
    load_branch,
    proposal_branch,
    push,
    write_pr_body,
)
from prime_ci.harness.store import HarnessError, HarnessStore
from prime_ci.isolation.worktree import GitError


def git_out(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"app.py": "print('hi')\n", ".gitignore": "out/\n"})


def run_files(tmp_path: Path, run_id: str) -> dict[str, Path]:
    out = tmp_path / "out" / run_id
    out.mkdir(parents=True)
    (out / "session.jsonl").write_text('{"type":"session","version":3}\n')
    (out / "result.json").write_text(f'{{"run_id": "{run_id}"}}\n')
    return {f"runs/{run_id}/session.jsonl": out / "session.jsonl", f"runs/{run_id}/result.json": out / "result.json"}


def test_commit_state_builds_an_orphan_branch_then_appends(repo: Path, tmp_path: Path) -> None:
    untouched = repo_state(repo)
    harness = tmp_path / "harness"
    store = HarnessStore(harness)
    store.create("memory", "x", "Tests need PYTHONPATH=src.", source_run="r1")
    store.create("prompt", "gone", "Soon deleted.", source_run="r1")
    first = commit_state(repo, "prime-harness", harness, run_files(tmp_path, "r1"), "harness: run r1")

    tree = git_out(repo, "ls-tree", "-r", "--name-only", first).splitlines()
    assert tree == ["harness/history.jsonl", "harness/memories/x.md", "harness/prompts/gone.md",
                    "runs/r1/result.json", "runs/r1/session.jsonl"]
    assert git_out(repo, "rev-list", "--parents", "-n1", first) == first  # no parent: an orphan
    assert git_out(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", first) == (
        "prime-ci <prime-ci@localhost>|prime-ci <prime-ci@localhost>|harness: run r1")
    stored = git_out(repo, "show", f"{first}:harness/memories/x.md")
    assert stored == (harness / "memories" / "x.md").read_text().strip()
    assert branch_tip(repo, "prime-harness") == first

    store.update("memory", "x", "Tests need PYTHONPATH=src; use -q.", source_run="r2")
    store.delete("prompt", "gone", source_run="r2")
    second = commit_state(repo, "prime-harness", harness, run_files(tmp_path, "r2"), "harness: run r2")
    assert git_out(repo, "rev-list", "--parents", "-n1", second) == f"{second} {first}"
    tree = git_out(repo, "ls-tree", "-r", "--name-only", second).splitlines()
    assert "harness/prompts/gone.md" not in tree
    assert {"runs/r1/session.jsonl", "runs/r2/session.jsonl", "runs/r2/result.json"} <= set(tree)
    assert repo_state(repo) == untouched  # HEAD, worktree, index and config as before
    assert git_out(repo, "branch", "--show-current") == "main"


def test_load_branch_round_trips_without_a_checkout(repo: Path, tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    store = HarnessStore(harness)
    store.create("memory", "x", "A fact.", source_run="r1")
    store.create("skill", "deploy", "---\ndescription: Deploy\n---\nRun ./deploy.sh", source_run="r1")
    tool = harness / "skills" / "deploy" / "deploy.sh"
    tool.write_text("#!/bin/sh\necho deploy\n")
    tool.chmod(0o755)
    commit_state(repo, "prime-harness", harness, {}, "state")
    untouched = repo_state(repo)

    dest = tmp_path / "loaded"
    assert load_branch(repo, "prime-harness", dest) is True
    assert files_of(dest) == files_of(harness)
    assert (dest / "skills" / "deploy" / "deploy.sh").stat().st_mode & 0o111
    loaded = HarnessStore(dest)
    assert loaded.list() == [replace(e, path=dest / e.path.relative_to(harness)) for e in store.list()]
    assert loaded.history() == store.history()
    assert repo_state(repo) == untouched

    assert load_branch(repo, "no-such-branch", tmp_path / "other") is False
    with pytest.raises(HarnessError, match="not empty"):
        load_branch(repo, "prime-harness", dest)
    with pytest.raises(HarnessError, match="invalid harness branch name"):
        load_branch(repo, "bad..name", tmp_path / "x")


def test_a_clone_loads_the_remote_branch_and_continues_it(repo: Path, tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    HarnessStore(harness).create("memory", "x", "A fact.", source_run="r1")
    first = commit_state(repo, "prime-harness", harness, {}, "state")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(repo), str(clone)], check=True)
    dest = tmp_path / "from-clone"
    assert load_branch(clone, "prime-harness", dest) is True  # found as origin/prime-harness
    assert (dest / "memories" / "x.md").read_bytes() == (harness / "memories" / "x.md").read_bytes()
    HarnessStore(dest).create("memory", "y", "Another fact.", source_run="r2")
    second = commit_state(clone, "prime-harness", dest, {}, "more")
    assert git_out(clone, "rev-list", "--parents", "-n1", second) == f"{second} {first}"


def test_proposals_build_on_the_harness_branch_and_push(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "remote", "add", "origin", str(remote)], cwd=repo, check=True)
    untouched = repo_state(repo)

    harness = tmp_path / "harness"
    store = HarnessStore(harness)
    store.create("memory", "x", "A fact.", source_run="r1")
    base = commit_state(repo, "prime-harness", harness, {}, "state")
    push(repo, "prime-harness")
    assert git_out(remote, "rev-parse", "refs/heads/prime-harness") == base

    cs = store.create("memory", "y", "A new fact.", source_run="r2", trigger="refine", evidence="see 0a1b2c3d")
    branch = proposal_branch("prime-harness", "r2")
    assert branch == "prime-harness-proposals/r2"
    proposed = commit_state(repo, branch, harness, run_files(tmp_path, "r2"), "proposal", base_branch="prime-harness")
    assert git_out(repo, "rev-list", "--parents", "-n1", proposed) == f"{proposed} {base}"
    assert git_out(repo, "diff", "--name-only", base, proposed).splitlines() == [
        "harness/history.jsonl", "harness/memories/y.md", "runs/r2/result.json", "runs/r2/session.jsonl"]
    assert branch_tip(repo, "prime-harness") == base  # the harness branch itself is unchanged
    push(repo, branch)
    assert git_out(remote, "rev-parse", f"refs/heads/{branch}") == proposed
    assert repo_state(repo) == untouched

    pr = tmp_path / "harness-pr.md"
    write_pr_body(pr, [cs], "Keep the fact about y.")
    body = pr.read_text()
    assert body.startswith("# Harness refinement proposal\n\n**Summary:** 1 change set(s), 1 operation(s): "
                           "create memory `y`.")
    assert "## Rationale\n\n```text\nKeep the fact about y.\n```" in body, "the model's words, as it wrote them"
    assert f"| 1 | `{cs.id}` | create | memory:`y` | see 0a1b2c3d |" in body
    assert "> see 0a1b2c3d" in body
    assert "```diff\n--- /dev/null\n+++ b/memory:y\n" in body and "+A new fact." in body


def test_push_refuses_when_the_remote_branch_moved(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "remote", "add", "origin", str(remote)], cwd=repo, check=True)
    harness = tmp_path / "harness"
    HarnessStore(harness).create("memory", "x", "A fact.", source_run="r1")
    commit_state(repo, "prime-harness", harness, {}, "state")
    push(repo, "prime-harness")

    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(remote), str(other)], check=True)
    other_harness = tmp_path / "other-harness"
    assert load_branch(other, "prime-harness", other_harness)
    HarnessStore(other_harness).create("memory", "y", "From elsewhere.", source_run="r2")
    moved = commit_state(other, "prime-harness", other_harness, {}, "elsewhere")
    push(other, "prime-harness")

    HarnessStore(harness).create("memory", "z", "Local.", source_run="r3")
    commit_state(repo, "prime-harness", harness, {}, "local")
    with pytest.raises(GitError, match="git push"):
        push(repo, "prime-harness")
    assert git_out(remote, "rev-parse", "refs/heads/prime-harness") == moved


def test_extra_files_cannot_escape_or_replace_the_harness(repo: Path, tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    HarnessStore(harness).create("memory", "x", "A fact.", source_run="r1")
    f = tmp_path / "f.txt"
    f.write_text("x")
    for bad in ("../outside", "/abs", "harness/memories/x.md", "runs/.git/config"):
        with pytest.raises(HarnessError):
            commit_state(repo, "prime-harness", harness, {bad: f}, "bad")
    assert branch_tip(repo, "prime-harness") is None
