"""REPO's uncommitted changes: the paths the run warns about and, with ``--include-dirty``, the snapshot.

Both come from one view: ``git status`` in REPO, honouring every ignore source the user's own git honours
(nested ``.gitignore`` files, REPO's ``info/exclude`` and the user's global excludes file, which the hardened
calls would otherwise not see because they read no global configuration). The snapshot adds exactly the
untracked paths that view lists, so a file ``git status --ignored`` shows as ``!!`` is never carried.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from prime_ci.isolation.gitcall import HARDENING, IDENTITY, git, git_text

# Environments and build trees (by directory name, anywhere; a directory with one of ENV_MARKERS is an
# environment whatever its name): never REPO's uncommitted changes, never in an --include-dirty snapshot
BUILD_TREES = ("node_modules", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".tox",
               ".nox", ".venv", ".eggs", "*.egg-info", "build", "dist", ".cache", ".next", ".nuxt", ".turbo",
               ".parcel-cache", ".gradle", "htmlcov", ".pnpm-store")
ENV_MARKERS = ("pyvenv.cfg", "conda-meta")
DIRTY_SHOWN = 50  # REPO's dirty paths kept in result.json (with the total)
# what points git at a repository: dropped when asking which excludes file the user's git reads in REPO
_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_CEILING_DIRECTORIES")


def user_excludes(repo: Path) -> str:
    """The global excludes file the user's git reads in REPO: ``core.excludesFile`` from the user's own
    configuration (system, global, REPO's, with includes; reading it runs nothing), else git's default
    ``$XDG_CONFIG_HOME/git/ignore`` or ``~/.config/git/ignore``. Empty when there is none."""
    env = {k: v for k, v in os.environ.items() if k not in _LOCATION}
    proc = subprocess.run(["git", *HARDENING, "config", "--path", "--get", "core.excludesFile"], cwd=repo, env=env,
                          capture_output=True, check=False, timeout=60)
    value = proc.stdout.decode(errors="surrogateescape").rstrip("\n") if proc.returncode == 0 else ""
    if value:
        return str(repo / value)  # git reads a relative path from the top of the work tree
    if env.get("XDG_CONFIG_HOME"):
        return os.path.join(env["XDG_CONFIG_HOME"], "git", "ignore")
    return os.path.join(env["HOME"], ".config", "git", "ignore") if env.get("HOME") else ""


def _status(repo: Path, untracked: str, pathspecs: Sequence[str] = (), *,
            excludes: str | None = None) -> list[tuple[str, bytes]]:
    """``git status`` in REPO, on REPO's files (whatever its ``core.worktree`` says) and without entering
    submodules (their configuration is theirs); read-only."""
    excludes = user_excludes(repo) if excludes is None else excludes
    proc = git(["-c", f"core.excludesFile={excludes}", "status", "--porcelain=v1", "-z",
                f"--untracked-files={untracked}", "--no-renames", "--ignore-submodules=dirty", "--", ".", *pathspecs],
               work_tree=repo, cwd=repo, check=False)
    if proc.returncode != 0:
        return []
    return [(item[:2].decode(), item[3:]) for item in proc.stdout.split(b"\0") if len(item) > 3]


def build_tree_excludes(repo: Path, excludes: str | None = None) -> list[str]:
    """Pathspecs leaving out REPO's untracked environments and build trees (``BUILD_TREES`` anywhere, and every
    untracked directory holding a ``pyvenv.cfg`` or ``conda-meta``): what a project does not commit whether or
    not it ignores it, so never its uncommitted changes."""
    envs = [os.fsdecode(name) for code, name in _status(repo, "normal", excludes=excludes)
            if code == "??" and name.endswith(b"/")
            and any((repo / os.fsdecode(name) / marker).exists() for marker in ENV_MARKERS)]
    return ([f":(exclude,literal){name.rstrip('/')}" for name in envs]
            + [f":(exclude,glob)**/{tree}/**" for tree in BUILD_TREES])


def _untracked(repo: Path, excludes: str) -> list[bytes]:
    """REPO's untracked, not ignored files (one by one), without environments and build trees."""
    return [name for code, name in _status(repo, "all", build_tree_excludes(repo, excludes), excludes=excludes)
            if code == "??"]


def dirty_paths(repo: Path) -> list[str]:
    """REPO's uncommitted and untracked (not ignored) paths, without its untracked environments and build trees;
    read-only (no index refresh is written)."""
    excludes = user_excludes(repo)
    tracked = [name for code, name in _status(repo, "no", excludes=excludes)]
    return [name.decode(errors="replace") for name in tracked + _untracked(repo, excludes)]


def snapshot(git_dir: Path, repo: Path, base: str, index: Path) -> str:
    """A commit on ``base`` holding REPO's tracked changes and the untracked paths ``dirty_paths`` lists (nothing
    any ignore source ignores), written into the clone only."""
    env = {"GIT_INDEX_FILE": str(index)}
    excludes = user_excludes(repo)
    git(["read-tree", base], git_dir=git_dir, env=env)
    git(["add", "-u", "--", "."], git_dir=git_dir, work_tree=repo, cwd=repo, env=env)
    new = _untracked(repo, excludes)
    if new:
        # --force: the list is already what REPO's own ignore sources leave; the clone lacks REPO's
        # .git/info/exclude, whose "!name" may re-include what the user's excludesFile ignores
        git(["-c", f"core.excludesFile={excludes}", "add", "--force", "--pathspec-from-file=-", "--pathspec-file-nul"],
            git_dir=git_dir, work_tree=repo, cwd=repo, env={**env, "GIT_LITERAL_PATHSPECS": "1"},
            input=b"\0".join(new))
    tree = git_text(["write-tree"], git_dir=git_dir, env=env)
    message = f"prime-ci: snapshot of the uncommitted changes in {repo} (--include-dirty)"
    commit = git_text([*IDENTITY, "commit-tree", tree, "-p", base, "-m", message], git_dir=git_dir)
    index.unlink(missing_ok=True)
    return commit
