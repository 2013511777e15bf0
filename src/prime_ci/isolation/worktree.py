"""Disposable worktrees, REPO's uncommitted changes, diffs.

The worktree is hostile input: the model (or the PR under review) controls its files. Every git call the
host makes goes through ``gitcall.git`` (no program the repository names runs) with an explicit ``--git-dir``
that lives outside the worktree (so a planted ``.git`` file or config inside it is never consulted).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.errors import ConfigError
from prime_ci.isolation.dirty import DIRTY_SHOWN as DIRTY_SHOWN
from prime_ci.isolation.dirty import dirty_paths as dirty_paths
from prime_ci.isolation.dirty import snapshot
from prime_ci.isolation.gitcall import IDENTITY as IDENTITY
from prime_ci.isolation.gitcall import GitDiskFull as GitDiskFull
from prime_ci.isolation.gitcall import GitError as GitError
from prime_ci.isolation.gitcall import git as git
from prime_ci.isolation.gitcall import git_text as git_text
from prime_ci.isolation.trees import remove_tree


@dataclass
class Worktree:
    """A disposable checkout: files in ``path``, git data in ``git_dir`` (outside ``path``)."""

    path: Path
    git_dir: Path
    base_commit: str
    root: Path
    source: str
    excludes: list[str] = field(default_factory=list)
    dirty: list[str] = field(default_factory=list)  # REPO's uncommitted paths when the run started
    snapshot_of: str | None = None  # with --include-dirty: the commit the snapshot was taken on

    def git(self, args: Sequence[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        return git(args, git_dir=self.git_dir, work_tree=self.path, cwd=self.path, **kw)  # type: ignore[arg-type]

    def _temp_index(self) -> dict[str, str]:
        """A throwaway index holding base + every worktree change (the real index is left alone)."""
        index = self.root / "diff.index"
        index.unlink(missing_ok=True)
        env = {"GIT_INDEX_FILE": str(index)}
        self.git(["read-tree", self.base_commit], env=env)
        self.git(["add", "-A", "--", "."], env=env)
        if self.excludes:
            # reset to base rather than an exclude pathspec: `add` refuses to run when such a pathspec names
            # an ignored path (a `.prime-ci/` in the project's .gitignore)
            self.git(["reset", "-q", self.base_commit, "--", *self.excludes], env=env)
        return env

    def diff(self) -> tuple[str, list[str]]:
        """``git diff`` against the base commit (new files included, binary-safe) and the changed paths,
        both from one snapshot of the worktree."""
        env = self._temp_index()
        patch = self.git(
            ["diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty",
             self.base_commit], env=env
        ).stdout.decode(errors="replace")
        names = self.git(["diff", "--cached", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv",
                          "--ignore-submodules=dirty", self.base_commit], env=env)
        return patch, [name for name in names.stdout.decode(errors="replace").split("\0") if name]

    def ignore(self, paths: list[str]) -> None:
        """Leave these worktree paths out of the diff and the fingerprint (the clone's own info/exclude)."""
        exclude = self.git_dir / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        escaped = ["/" + re.sub(r"([\\*?\[\]!# ])", r"\\\1", p.rstrip("/")) for p in paths]
        with exclude.open("a", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write("".join(f"{p}\n" for p in escaped))

    def untracked(self) -> list[str]:
        """Untracked, not ignored paths (a new directory as one entry)."""
        out = self.git(["status", "--porcelain=v1", "-z", "--untracked-files=normal", "--no-renames",
                        "--ignore-submodules=dirty"]).stdout
        return [e[3:].decode(errors="surrogateescape") for e in out.split(b"\0") if e.startswith(b"?? ")]

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def clear(self, keep: Sequence[str] = ("git", "harness")) -> int:
        """Delete the checkout and what the run made beside it (scratch home, run environment, caches: a pnpm
        store or a node_modules tree can take minutes) except ``keep``, which the artifacts still need;
        returns how many entries went."""
        count = 0
        for child in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if child.name not in keep:
                count += remove_tree(child)
        return count


def is_url(repo: str) -> bool:
    return "://" in repo or repo.startswith("git@") or repo.startswith("file:")


def resolve_source(repo: str) -> str:
    """Validate REPO (a local path or a git URL) without touching it."""
    if is_url(repo):
        return repo
    path = Path(repo).expanduser().resolve()
    if not path.exists():
        raise ConfigError(f"repository not found: {repo}")
    probe = git(["rev-parse", "--git-dir"], cwd=path, check=False)
    if probe.returncode != 0:
        raise ConfigError(f"not a git repository: {repo}")
    return str(path)


def create_worktree(repo: str, ref: str | None, *, parent: Path | None = None, include_dirty: bool = False) -> Worktree:
    """Clone REPO into a fresh temp dir; the original repository is only read.

    REPO's uncommitted and untracked (not ignored) paths are listed in ``dirty`` (only when starting from its
    HEAD); with ``include_dirty`` the worktree's base is a snapshot commit of REPO's working tree.
    """
    source = resolve_source(repo)
    if include_dirty and (ref is not None or is_url(source)):
        raise ConfigError("--include-dirty: only for a local REPO at its HEAD (without --ref)")
    root = Path(tempfile.mkdtemp(prefix="prime-ci-wt-", dir=parent))
    git_dir = root / "git"
    path = root / "work"
    try:
        git(
            ["clone", "--quiet", "--no-checkout", "--no-hardlinks", f"--separate-git-dir={git_dir}",
             "--", source, str(path)],
        )
        base = resolve_ref(git_dir, ref or "HEAD")
        dirty = dirty_paths(Path(source)) if ref is None and not is_url(source) else []
        snapshot_of = None
        if include_dirty and dirty:
            snapshot_of, base = base, snapshot(git_dir, Path(source), base, root / "dirty.index")
        git(["checkout", "--quiet", "--detach", base], git_dir=git_dir, work_tree=path, cwd=path)
    except GitError as exc:
        shutil.rmtree(root, ignore_errors=True)
        if isinstance(exc, GitDiskFull):  # a full disk is exit 6, not a usage error
            raise
        raise ConfigError(str(exc)) from exc
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return Worktree(path=path, git_dir=git_dir, base_commit=base, root=root, source=source, dirty=dirty,
                    snapshot_of=snapshot_of)


def commit_directory(src: Path, dest: Path, message: str, *, env: dict[str, str] | None = None) -> str:
    """A new git repository at ``dest`` holding a copy of the plain directory ``src`` (bundled package data:
    a ``gitignore`` stands for ``.gitignore``, which packages cannot ship reliably; bytecode and pytest caches
    stay out), committed once; its commit. ``env`` may fix the author, committer and dates."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    if (dest / "gitignore").is_file() and not (dest / ".gitignore").exists():
        (dest / "gitignore").rename(dest / ".gitignore")
    git(["init", "--quiet", "--initial-branch=main"], cwd=dest)
    git(["add", "-A"], cwd=dest)
    git([*IDENTITY, "commit", "--quiet", "-m", message], cwd=dest, env=env)
    return git_text(["rev-parse", "HEAD"], cwd=dest)


def resolve_ref(git_dir: Path, ref: str) -> str:
    for candidate in (ref, f"origin/{ref}"):
        proc = git(["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"], git_dir=git_dir, check=False)
        if proc.returncode == 0:
            return proc.stdout.decode().strip()
    raise ConfigError(f"ref not found in repository: {ref}")


def read_file_at(git_dir: Path, ref: str, path: str) -> str:
    """The text of PATH at REF, read from git objects (never from the worktree)."""
    proc = git(["show", f"{ref}:{path}"], git_dir=git_dir, check=False)
    if proc.returncode != 0:
        raise ConfigError(f"{path}: not found at {ref}")
    return proc.stdout.decode(errors="replace")
