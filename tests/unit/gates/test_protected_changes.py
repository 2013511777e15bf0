"""Issue 24 item 10: changes that can make gates lie are protected: any edit under ``.github/workflows/`` (at any
depth), and a changed pytest section in pyproject.toml, setup.cfg or tox.ini (while other sections of those
files stay the project's to change)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo
from prime_ci.gates import protect
from prime_ci.isolation.worktree import Worktree, create_worktree
from unit.gates.protected_files import FILES


@pytest.fixture
def worktree(tmp_path: Path) -> Iterator[Worktree]:
    wt = create_worktree(str(make_repo(tmp_path / "repo", {**BUGGY, **FILES})), None)
    yield wt
    wt.remove()


def _edit(wt: Worktree, path: str, old: str, new: str) -> list[str]:
    target = wt.path / path
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new))
    return [path]


@pytest.mark.parametrize(("path", "old", "new"), [
    ("pyproject.toml", 'addopts = "-q"', 'addopts = "-q -k not_the_failing_test"'),
    ("setup.cfg", "addopts = -q", "addopts = -q -k not_the_failing_test"),
    ("tox.ini", "addopts = -q", "addopts = -q -k not_the_failing_test"),
    ("tox.ini", "[pytest]\naddopts = -q", "[pytest]\naddopts = -q\npython_files = nothing_*.py"),
])
def test_a_changed_pytest_section_is_protected(worktree: Worktree, path: str, old: str, new: str) -> None:
    changed = _edit(worktree, path, old, new)
    assert protect.check(worktree, changed, [], [], []).protected == [path]


@pytest.mark.parametrize(("path", "old", "new"), [
    ("pyproject.toml", 'version = "1.0"', 'version = "1.1"'),
    ("setup.cfg", "name = calc", "name = calc2"),
    ("tox.ini", "envlist = py311", "envlist = py312"),
])
def test_other_sections_of_those_files_are_not(worktree: Worktree, path: str, old: str, new: str) -> None:
    changed = _edit(worktree, path, old, new)
    assert protect.check(worktree, changed, [], [], []).protected == []


@pytest.mark.parametrize("path", [".github/workflows/ci.yml", ".github/workflows/nested/reusable.yml",
                                  ".github/workflows/new.yml"])
def test_any_workflow_edit_is_protected_unless_allowed(worktree: Worktree, path: str) -> None:
    assert protect.check(worktree, [path], [], [], []).protected == [path]
    assert protect.check(worktree, [path], [], [".github/workflows/**"], []).protected == []
