"""Harness state on a git branch: load it, commit a new state, propose it for review, push it.

Everything goes through git objects and refs (``ls-tree``/``cat-file`` to read; a temporary index,
``write-tree``, ``commit-tree`` and a compare-and-swap ``update-ref`` to write): no checkout, so the
repository's worktree, index and HEAD are never touched. All calls use the hardened ``git`` helper.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from prime_ci.artifacts import markup
from prime_ci.harness.store import ChangeSet, HarnessError
from prime_ci.isolation import durable
from prime_ci.isolation.paths import relative_name
from prime_ci.isolation.untrusted import visible
from prime_ci.isolation.worktree import git

ZERO = "0" * 40
PREFIX = "harness"
IDENTITY = {"GIT_AUTHOR_NAME": "prime-ci", "GIT_AUTHOR_EMAIL": "prime-ci@localhost",
            "GIT_COMMITTER_NAME": "prime-ci", "GIT_COMMITTER_EMAIL": "prime-ci@localhost"}


def git_dir_of(repo: Path) -> Path:
    """The git directory of a repository path (its ``.git`` directory, or the path itself when bare)."""
    dotgit = repo / ".git"
    return dotgit if dotgit.is_dir() else repo


def check_branch(repo: Path, branch: str) -> None:
    proc = git(["check-ref-format", f"refs/heads/{branch}"], git_dir=git_dir_of(repo), check=False)
    if proc.returncode != 0 or branch.startswith("-"):
        raise HarnessError(f"invalid harness branch name {branch!r}")


def branch_tip(repo: Path, branch: str) -> str | None:
    """The commit of ``branch`` (a local branch, else ``origin/<branch>`` of a clone), or None."""
    check_branch(repo, branch)
    for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
        proc = git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], git_dir=git_dir_of(repo), check=False)
        if proc.returncode == 0:
            return proc.stdout.decode().strip()
    return None


def proposal_branch(branch: str, run_id: str) -> str:
    return f"{branch}-proposals/{run_id}"


def _safe_rel(path: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if not relative_name(path) or not rel.parts or ".git" in rel.parts:
        raise HarnessError(f"unsafe path in harness branch: {path!r}")
    return rel


def load_branch(repo_git_dir: Path, branch: str, dest: Path) -> bool:
    """Extract the branch's ``harness/`` tree into ``dest``; False when the branch does not exist.

    Regular files only: symlinks and submodules in the tree are not harness state and are skipped.
    """
    gd = git_dir_of(repo_git_dir)
    tip = branch_tip(repo_git_dir, branch)
    if tip is None:
        return False
    if dest.exists() and any(dest.iterdir()):
        raise HarnessError(f"cannot load harness branch {branch!r} into {dest}: the directory is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    listing = git(["ls-tree", "-r", "-z", "--full-tree", tip, "--", f"{PREFIX}/"], git_dir=gd).stdout
    blobs: list[tuple[bytes, str, str]] = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, raw_name = record.partition(b"\t")
        raw_mode, kind, raw_sha = meta.split()
        if kind == b"blob" and raw_mode in (b"100644", b"100755"):
            blobs.append((raw_mode, raw_sha.decode(), raw_name.decode("utf-8", errors="surrogateescape")))
    if not blobs:
        return True
    data = git(["cat-file", "--batch"], git_dir=gd, input="".join(f"{sha}\n" for _, sha, _ in blobs).encode()).stdout
    pos = 0
    for mode, sha, name in blobs:
        header_end = data.index(b"\n", pos)
        got_sha, _, size = data[pos:header_end].decode().split()
        if got_sha != sha:
            raise HarnessError(f"git cat-file returned {got_sha} for {sha}")
        body = data[header_end + 1 : header_end + 1 + int(size)]
        pos = header_end + 1 + int(size) + 1
        target = dest.joinpath(*_safe_rel(name).relative_to(PREFIX).parts)
        durable.write(target, body, redacted=True, mode=0o755 if mode == b"100755" else 0o644)  # the branch's bytes
    return True


def _harness_files(harness_dir: Path) -> list[tuple[str, Path]]:
    """(repo path, file) for the harness state; hidden files (locks, temp files) and caches are left out."""
    files: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(harness_dir, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if name.startswith(".") or path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(harness_dir).as_posix()
            files.append((f"{PREFIX}/{rel}", path))
    return files


def commit_state(repo_git_dir: Path, branch: str, harness_dir: Path, extra_files: Mapping[str, Path],
                 message: str, *, base_branch: str | None = None) -> str:
    """Commit ``harness_dir`` as ``harness/`` plus ``extra_files`` (repo path -> file) onto ``branch``.

    The branch's other content is kept; its ``harness/`` tree is replaced as a whole. A new branch starts
    from ``base_branch`` when that exists (a proposal on top of the harness branch), else as an orphan.
    Returns the new commit (the old tip when nothing changed). The ref is moved only if it still points
    where it did when the commit was built.
    """
    if not harness_dir.is_dir():
        raise HarnessError(f"harness directory not found: {harness_dir}")
    gd = git_dir_of(repo_git_dir)
    local = git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], git_dir=gd, check=False)
    old = local.stdout.decode().strip() if local.returncode == 0 else ZERO
    parent = branch_tip(repo_git_dir, branch)
    if parent is None and base_branch is not None:
        parent = branch_tip(repo_git_dir, base_branch)
    files = _harness_files(harness_dir)
    for repo_path, path in extra_files.items():
        rel = _safe_rel(repo_path)
        if rel.parts[0] == PREFIX:
            raise HarnessError(f"extra file {repo_path!r} would overwrite the harness tree")
        files.append((rel.as_posix(), path))
    if any("\n" in p or "\n" in str(f) for p, f in files):
        raise HarnessError("file names with newlines cannot be committed to the harness branch")
    with tempfile.TemporaryDirectory(prefix="prime-ci-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **IDENTITY}
        if parent is not None:
            git(["read-tree", parent], git_dir=gd, env=env)
            stale = git(["ls-tree", "-r", "-z", "--name-only", "--full-tree", parent, "--", f"{PREFIX}/"],
                        git_dir=gd).stdout
            removals = b"".join(b"0 " + ZERO.encode() + b"\t" + p + b"\0" for p in stale.split(b"\0") if p)
            if removals:
                git(["update-index", "-z", "--index-info"], git_dir=gd, env=env, input=removals)
        if files:
            paths = "".join(f"{f.resolve()}\n" for _, f in files).encode()
            shas = git(["hash-object", "-w", "--no-filters", "--stdin-paths"], git_dir=gd, input=paths).stdout.split()
            info = b"".join(
                f"{_mode(f)} {sha.decode()}\t{p}".encode() + b"\0" for (p, f), sha in zip(files, shas, strict=True)
            )
            git(["update-index", "-z", "--add", "--index-info"], git_dir=gd, env=env, input=info)
        tree = git(["write-tree"], git_dir=gd, env=env).stdout.decode().strip()
    if parent is not None:
        parent_tree = git(["rev-parse", f"{parent}^{{tree}}"], git_dir=gd).stdout.decode().strip()
        if parent_tree == tree:
            if old == ZERO:
                git(["update-ref", f"refs/heads/{branch}", parent, ZERO], git_dir=gd)
            return parent
    args = ["commit-tree", tree, *(["-p", parent] if parent else []), "-F", "-"]
    commit = git(args, git_dir=gd, env=IDENTITY, input=message.encode()).stdout.decode().strip()
    git(["update-ref", "-m", "prime-ci: harness state", f"refs/heads/{branch}", commit, old], git_dir=gd)
    return commit


def _mode(path: Path) -> str:
    return "100755" if path.stat().st_mode & stat.S_IXUSR else "100644"


def push(repo_git_dir: Path, branch: str, remote: str = "origin") -> None:
    """Push ``branch`` to ``remote`` (fast-forward only: a moved remote branch is an error)."""
    check_branch(repo_git_dir, branch)
    git(["push", "--quiet", remote, f"refs/heads/{branch}:refs/heads/{branch}"], git_dir=git_dir_of(repo_git_dir))


def _clip(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def write_pr_body(path: Path, changesets: Sequence[ChangeSet], rationale: str) -> None:
    """``harness-pr.md``: summary, rationale, a table of the operations, and per-op evidence and diff. What the
    refining model wrote (rationale, names, evidence, entries) goes through ``artifacts.markup``: never markup."""
    ops = [(cs, op) for cs in changesets for op in cs.ops]
    listed = ", ".join(f"{markup.text(op.op)} {markup.text(op.kind)} {markup.code_span(op.name)}"
                       for _, op in ops) or "no operations"
    runs = sorted({cs.source_run for cs in changesets if cs.source_run})
    lines = ["# Harness refinement proposal", "",
             f"**Summary:** {len(changesets)} change set(s), {len(ops)} operation(s): {listed}."]
    if runs:
        lines.append(f"Source run(s): {', '.join(markup.code_span(run) for run in runs)}.")
    lines += ["", "## Rationale", "", *markup.fenced(rationale.strip() or "(none given)"), "", "## Operations", "",
              "| # | change set | op | entry | evidence |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {markup.code_cell(cs.id)} | {markup.text_cell(op.op)} | {markup.text_cell(op.kind)}:"
              f"{markup.code_cell(op.name)} | {markup.text_cell(_clip(op.evidence))} |"
              for n, (cs, op) in enumerate(ops, start=1)]
    lines += ["", "## Evidence and diffs", ""]
    for n, (cs, op) in enumerate(ops, start=1):
        lines += [f"### {n}. {markup.text(op.op)} {markup.text(op.kind)} {markup.code_span(op.name)} "
                  f"({markup.code_span(cs.id)})", ""]
        lines += [f"> {markup.text(line)}" if line.strip() else ">"
                  for line in (op.evidence.strip() or "(no evidence)").splitlines()]
        lines += ["", "<details><summary>diff</summary>", "", *markup.fenced(op.diff(), "diff"), "", "</details>", ""]
    lines += ["## Review", "",
              "Merging this branch makes these entries part of the harness that later runs load. Entries "
              "marked `trust: untrusted` stay out of prompts until `prime-ci harness trust KIND NAME`. "
              "Undo a change set with `prime-ci harness rollback ID`.", ""]
    durable.write(path, visible("\n".join(lines)))
