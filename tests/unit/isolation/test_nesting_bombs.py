"""A document nested a hundred thousand levels deep (``a = [[[[…]]]]``) is a malformed document wherever prime-ci
reads TOML or JSON someone else wrote: the repository's settings and gate files, a ``pyproject.toml`` the model
wrote, a bench suite, a run's result.json. Python's parsers raise ``RecursionError`` for it, which ended the run
(or the command) with a traceback and, for the model's pyproject.toml, without artifacts."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo
from prime_ci.artifacts.multireport import aggregate
from prime_ci.bench.suite import load_suite
from prime_ci.engine.config import file_settings
from prime_ci.errors import ConfigError
from prime_ci.gates import protect
from prime_ci.gates.runner import load_gate_files
from prime_ci.isolation.parse import json_loads, toml_loads
from prime_ci.isolation.worktree import Worktree, create_worktree

DEPTH = 100_000
TOML_BOMB = "x = " + "[" * DEPTH + "]" * DEPTH + "\n"
JSON_BOMB = "[" * DEPTH + "]" * DEPTH


def test_the_parsers_raise_their_own_errors() -> None:
    with pytest.raises(tomllib.TOMLDecodeError, match="nested too deeply"):
        toml_loads(TOML_BOMB)
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        json_loads(JSON_BOMB)
    assert toml_loads("x = [[1]]") == {"x": [[1]]} and json_loads(b"[[1]]") == [[1]]


@pytest.mark.parametrize("name, text", [("prime-ci.toml", TOML_BOMB),
                                        ("pyproject.toml", "[tool.prime-ci]\n" + TOML_BOMB)])
def test_repository_settings_nested_too_deeply_are_ignored_with_a_warning(tmp_path: Path, name: str,
                                                                          text: str) -> None:
    (tmp_path / name).write_text(text)
    warnings: list[str] = []
    assert file_settings(tmp_path, warnings.append) == {}
    assert warnings == [f"{name}: not valid TOML (nested too deeply): the repository's settings are ignored"]


def test_a_gate_file_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "gates.toml").write_text(TOML_BOMB)
    with pytest.raises(ConfigError, match="invalid TOML: nested too deeply"):
        load_gate_files([tmp_path / "gates.toml"])


@pytest.fixture
def worktree(tmp_path: Path) -> Iterator[Worktree]:
    files = {**BUGGY, "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-q"\n'}
    wt = create_worktree(str(make_repo(tmp_path / "repo", files)), None)
    yield wt
    wt.remove()


def test_a_pyproject_the_model_nested_too_deeply_is_a_protected_change(worktree: Worktree) -> None:
    (worktree.path / "pyproject.toml").write_text(TOML_BOMB)
    assert protect.check(worktree, ["pyproject.toml"], [], [], []).protected == ["pyproject.toml"]


def test_a_suite_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "suite.toml").write_text(TOML_BOMB)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_suite(tmp_path / "suite.toml")


def test_a_result_json_nested_too_deeply_is_not_a_run_to_report(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(JSON_BOMB)
    with pytest.raises(ConfigError, match=r"is not valid JSON .*nested too deeply"):
        aggregate([tmp_path])


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_a_json_suite_nested_too_deeply_is_a_config_error(tmp_path: Path, form: str) -> None:
    """Found by the nightly fuzz of suite files."""
    (tmp_path / f"suite.{form}").write_text(JSON_BOMB)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_suite(tmp_path / f"suite.{form}")
