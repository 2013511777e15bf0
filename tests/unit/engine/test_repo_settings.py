"""Issue 24 item 7 (DESIGN §13): repository settings that are not allowed, malformed, or in conflict with the
operator's are ignored with one warning each, never fatal: a repository cannot refuse a run. The operator's own
mistakes stay exit 2."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import BUGGY, make_repo
from prime_ci.engine import repo_values
from prime_ci.engine.config import RunConfig, build_config, file_settings
from prime_ci.engine.prepare import Prepared, load_gates, load_setup, prepare, reach_paths
from prime_ci.errors import ConfigError
from prime_ci.isolation.worktree import Worktree, create_worktree

OPERATOR = {"task": "the operator's task", "model": "openai/x"}


def settings(tmp_path: Path, text: str, name: str = "prime-ci.toml") -> tuple[RunConfig, list[str]]:
    (tmp_path / name).write_text(text)
    warnings: list[str] = []
    cfg = build_config(OPERATOR, file_settings(tmp_path, warnings.append), warnings.append)
    return cfg, warnings


@pytest.mark.parametrize(("text", "key", "field", "kept"), [
    ('task-file = "README.md"', "task-file", "task_file", None),
    ('task = "exfiltrate"', "task", "task", "the operator's task"),
    ('untrusted-file = "/etc/hostname"', "untrusted-file", "untrusted_file", None),
    ('model = "anthropic/claude-sonnet-4-5"', "model", "model", "openai/x"),
    ("refine = true", "refine", "refine", False),
    ('limits = "memory=64GiB,pids=none"', "limits", "limits", RunConfig().limits),
    ("include-dirty = true", "include-dirty", "include_dirty", False),
    ('sandbox = "off"', "sandbox", "sandbox", "auto"),
    ("max-tokens = 5000000", "max-tokens", "max_tokens", 2_000_000),
    ('max-wall = "3h"', "max-wall", "max_wall", 1800.0),
    ("max-children = 64", "max-children", "max_children", 4),
    ("max-cost = 1.5", "max-cost", "max_cost", None),  # openai/x has no known price: the cap cannot be kept
    ('max-turns = "many"', "max-turns", "max_turns", 40),
    ("max-wall = 0", "max-wall", "max_wall", 1800.0),
    ("max-turns = 0", "max-turns", "max_turns", 40),
    ('python = "/usr/bin/python3"', "python", "python", None),
    ('python = "sh"', "python", "python", None),
    ('sandbox-ro = ["/etc"]', "sandbox-ro", "sandbox_ro", []),
    ('[sandbox]\nread = ["/etc"]', "sandbox", "sandbox_ro", []),
    ('[sandbox]\nread = "notalist"', "sandbox", "sandbox_ro", []),
    ('gates-file = ["/etc/passwd"]', "gates-file", "gates_file", []),
    ('gates-file = ["../outside.toml"]', "gates-file", "gates_file", []),
    ('gates-file = "gates.toml"', "gates-file", "gates_file", []),
    ('no-such-setting = 1', "no-such-setting", None, None),
    ("context-window = 10", "context-window", "context_window", None),
    ('gate = "not a list"', "gate", "gate", []),
])
def test_a_setting_the_repository_may_not_set_is_ignored_with_one_warning(
        tmp_path: Path, text: str, key: str, field: str | None, kept: Any) -> None:
    cfg, warnings = settings(tmp_path, "max-gate-retries = 1\n" + text + "\n")
    assert len(warnings) == 1, warnings
    assert f"'{key}'" in warnings[0] or key in warnings[0], warnings
    assert "ignored" in warnings[0]
    if field is not None:
        assert getattr(cfg, field) == kept
    assert cfg.max_gate_retries == 1, "the repository's other settings still apply"


def test_unreadable_settings_files_are_ignored_whole(tmp_path: Path) -> None:
    cfg, warnings = settings(tmp_path, "max-turns = [\n")
    assert len(warnings) == 1 and "prime-ci.toml" in warnings[0] and "not valid TOML" in warnings[0]
    assert cfg.max_turns == 40
    (tmp_path / "prime-ci.toml").unlink()
    for text in ("tool = 1\n", "[tool]\nprime-ci = 3\n"):
        cfg, warnings = settings(tmp_path, text, "pyproject.toml")
        assert warnings == [] and cfg.max_turns == 40


def test_allowed_settings_still_apply_and_operator_flags_win(tmp_path: Path) -> None:
    cfg, warnings = settings(tmp_path, 'max-turns = 3\npython = "python3"\n[sandbox]\nread = ["docs"]\n')
    assert warnings == [] and cfg.max_turns == 3 and cfg.python == "python3" and cfg.sandbox_ro == ["docs"]
    warnings = []
    cfg = build_config({**OPERATOR, "max_turns": 2}, {"max_turns": 3}, warnings.append)
    assert cfg.max_turns == 2 and warnings == [], "the operator's lower value wins without a word"


@pytest.fixture
def worktree(tmp_path: Path) -> Iterator[Worktree]:
    outside = tmp_path / "host-secret.toml"
    outside.write_text('[[gate]]\nname = "host"\ncommand = "true"\n')
    repo = make_repo(tmp_path / "repo", {
        **BUGGY,
        "ok.toml": '[[gate]]\nname = "unit"\ncommand = "true"\n',
        "again.toml": '[[gate]]\nname = "unit"\ncommand = "false"\n',
        "broken.toml": "[[gate]\n",
        "badsetup.toml": '[[gate]]\nname = "g2"\ncommand = "true"\n[[setup]]\nnonsense = 1\n',
        "docs/readme.md": "docs\n",
    })
    os.symlink(outside, repo / "escape.toml")
    os.symlink("/etc", repo / "etc-link")
    make_repo(repo, {}, message="links")
    wt = create_worktree(str(repo), None)
    yield wt
    wt.remove()


def test_repository_values_that_fail_against_the_worktree_are_ignored(worktree: Worktree) -> None:
    repo_cfg = RunConfig(
        **OPERATOR,
        gate=["true", "  "],
        gates_file=["ok.toml", "missing.toml", "broken.toml", "escape.toml", "again.toml", "badsetup.toml"],
        setup=["echo one", {"name": "t", "command": "true", "bogus": 1}, {"command": ""}],
        build=["make ext", {"name": "b", "command": "make", "strange": 1}, "make ext"],
        sandbox_ro=["docs", "etc-link", "nowhere"],
        python="python9.99",
    )
    warnings: list[str] = []
    keys = {"gate", "gates_file", "setup", "build", "sandbox_ro", "python"}
    cfg = repo_values.admit(repo_cfg, worktree, keys, warnings.append)
    assert cfg.gate == ["true"]
    assert cfg.gates_file == ["ok.toml"]
    assert cfg.setup == ["echo one"]
    assert cfg.build == ["make ext"]
    assert cfg.sandbox_ro == ["docs"]
    assert cfg.python is None
    ignored = ["empty gate", "missing.toml", "broken.toml", "escape.toml", "again.toml", "badsetup.toml",
               "bogus", "''", "strange", "already used", "etc-link", "nowhere", "python9.99"]
    assert len(warnings) == len(ignored), warnings
    for needle, warning in zip(ignored, warnings, strict=True):
        assert needle in warning and "ignored" in warning, (needle, warning)
    # what is left loads without an error
    assert [g.name for g in load_gates(cfg, worktree)] == ["true", "unit"]
    assert [s.command for s in load_setup(cfg, worktree, repository_setup=True, warn=warnings.append)] == ["echo one"]


def test_operator_values_are_not_admitted_but_stay_errors(worktree: Worktree) -> None:
    cfg = RunConfig(**OPERATOR, gates_file=["missing.toml"], sandbox_ro=["nowhere"])
    assert repo_values.admit(cfg, worktree, set(), [].append) == cfg
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        load_gates(cfg, worktree)
    with pytest.raises(ConfigError, match="--sandbox-ro"):
        reach_paths(cfg, worktree, [], type("P", (), {"readable": lambda self: []})())  # type: ignore[arg-type]


def _prepare(repo: Path, **flags: Any) -> tuple[Prepared, list[str]]:
    said: list[str] = []
    prep = prepare({"repo": str(repo), "task": "t", "model": "openai/x", "api_base": "http://127.0.0.1:9/v1",
                    **flags}, said.append)
    prep.worktree.remove()
    return prep, said


def test_prepare_warns_once_and_goes_on(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "prime-ci.toml": (
        'task-file = "README.md"\nmax-turns = 99\ngates-file = ["missing.toml"]\n'
        'python = "python9.99"\nmax-wall = "10m"\n')})
    prep, said = _prepare(repo, max_turns=5)
    warnings = [s for s in said if s.startswith("warning:")]
    assert len(warnings) == 3, said  # max-turns is the operator's: no conflict to report
    assert "task-file" in warnings[0] and "missing.toml" in warnings[1] and "python9.99" in warnings[2]
    assert prep.cfg.task == "t" and prep.cfg.task_file is None and prep.cfg.max_turns == 5
    assert prep.cfg.max_wall == 600 and prep.cfg.gates_file == [] and prep.cfg.python is None


@pytest.mark.parametrize("flags", [{"gates_file": ["missing.toml"]}, {"python": "python9.99"},
                                   {"sandbox_ro": ["nowhere"]}, {"max_cost": 1.0}])
def test_the_same_mistakes_from_the_operator_exit_2(tmp_path: Path, flags: dict[str, Any]) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    with pytest.raises(ConfigError):
        _prepare(repo, **flags)
