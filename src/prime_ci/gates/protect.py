"""Protected paths: changes that could make gates lie (gate files, test-runner config, workflows).

A run whose diff touches one of these ends with ``security_stop`` (exit 7) unless the path matches an
``--allow-protected`` glob. Edits to test files are allowed but listed in result.json ``flags`` so a reviewer
sees them. Config files that hold more than test settings (pyproject.toml, setup.cfg, tox.ini) count only
when their test-runner section itself changed.
"""

from __future__ import annotations

import configparser
import posixpath
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from prime_ci.isolation.parse import toml_loads
from prime_ci.isolation.paths import inside
from prime_ci.isolation.worktree import Worktree, is_url

# every file pytest reads its configuration from (pytest 9 added pytest.toml and .pytest.toml)
PYTEST_FILES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml")
ALWAYS = (".github/workflows/*", ".github/workflows/**", "conftest.py", "**/conftest.py", *PYTEST_FILES,
          *(f"**/{name}" for name in PYTEST_FILES), "sitecustomize.py", "**/sitecustomize.py", "usercustomize.py",
          "**/usercustomize.py", "*.pth", "**/*.pth", ".prime-ci/gates*", "action.yml", "action.yaml")
TEST_FILES = ("test_*.py", "*_test.py", "tests/**", "test/**", "**/tests/**", "**/test/**")
# ignored files that can change what a test run does: code and its hooks (bytecode is neutralised by running
# gates with PYTHONPYCACHEPREFIX outside the worktree)
IMPORTABLE = (".py", ".pth", ".so", ".pyd")
BUILD_DIRS = ("build/", "dist/", "node_modules/", ".prime-ci/", ".tox/", ".nox/", ".venv/", "venv/")


def _match(path: str, patterns: Iterable[str]) -> bool:
    name = PurePosixPath(path).name
    return any(fnmatchcase(path, p) or ("/" not in p and fnmatchcase(name, p)) for p in patterns)


@dataclass
class Verdict:
    protected: list[str] = field(default_factory=list)
    tests_modified: list[str] = field(default_factory=list)

    def flags(self) -> list[str]:
        return [f"protected path changed: {p}" for p in self.protected] + [
            f"test file modified: {p}" for p in self.tests_modified
        ]


def check(wt: Worktree, changed: list[str], gate_files: list[str], allow: list[str], hidden: list[str]) -> Verdict:
    """The protected paths among ``changed`` and ``hidden`` (``hidden_changes``: ignored files the run made that
    steer the tests), less those ``allow`` lets through, and the test files modified."""
    verdict = Verdict()
    gate_files = [name for g in gate_files if (name := _in_worktree(wt, g)) is not None]
    for path in changed:
        if _match(path, TEST_FILES) and not _match(path, ALWAYS):
            verdict.tests_modified.append(path)
        hit = _match(path, ALWAYS) or path in gate_files or _runner_section_changed(wt, path)
        if hit and not _match(path, allow):
            verdict.protected.append(path)
    verdict.protected += [f"{p} (hidden from the patch by .gitignore)" for p in hidden if not _match(p, allow)]
    return verdict


def _in_worktree(wt: Worktree, name: str) -> str | None:
    """A gate file as a path in the worktree: the repository's names as written (``./gates.toml`` is
    ``gates.toml``); the operator's absolute paths by their place in a local REPO, else None."""
    if not PurePath(name).is_absolute():
        return posixpath.normpath(name)
    if is_url(wt.source) or not inside(wt.source, name, resolve=True):
        return None
    return Path(name).resolve().relative_to(Path(wt.source).resolve()).as_posix()


def watched(path: str) -> bool:
    """An ignored file that can change what a test run does: code and its hooks, outside build and tool dirs."""
    if "__pycache__/" in path or path.startswith(BUILD_DIRS) or ".egg-info/" in path:
        return False
    return _match(path, ALWAYS) or path.endswith(IMPORTABLE)


def steers_runner(path: str) -> bool:
    """A file that configures or hooks the test runner itself (conftest.py, pytest.ini, *.pth...): never
    excused as a build output."""
    return _match(path, ALWAYS)


def hidden_changes(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """Ignored files the run created or changed that can steer the tests (a conftest.py hidden by a new
    .gitignore line, a shadowing module): the patch would not show them, yet the gates ran with them.
    ``before`` holds what the run vouches for (the files it started with, and what its builds wrote)."""
    return [path for path, stamp in sorted(after.items()) if before.get(path) != stamp and watched(path)]


def _runner_section_changed(wt: Worktree, path: str) -> bool:
    name = PurePosixPath(path).name
    if name not in ("pyproject.toml", "setup.cfg", "tox.ini"):
        return False
    before = _base_text(wt, path)
    after = _work_text(wt, path)
    if name == "pyproject.toml":
        return bool(_toml_section(before) != _toml_section(after))
    section = "tool:pytest" if name == "setup.cfg" else "pytest"
    return bool(_ini_section(before, section) != _ini_section(after, section))


def _base_text(wt: Worktree, path: str) -> str:
    proc = wt.git(["show", f"{wt.base_commit}:{path}"], check=False)
    return proc.stdout.decode(errors="replace") if proc.returncode == 0 else ""


def _work_text(wt: Worktree, path: str) -> str:
    target = wt.path / path
    if target.is_symlink() or not target.is_file():
        return "" if not target.is_symlink() else f"<symlink {target.readlink()}>"
    return target.read_text(encoding="utf-8", errors="replace")


def _toml_section(text: str) -> Any:
    try:
        data = toml_loads(text)
    except tomllib.TOMLDecodeError:
        return ("unparsable", text)  # an unparsable file is a change to its pytest section too
    tool = data.get("tool", {})
    return {k: v for k, v in tool.items() if k in ("pytest", "coverage", "tox")}


def _ini_section(text: str, section: str) -> Any:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return ("unparsable", text)
    return dict(parser[section]) if parser.has_section(section) else None
