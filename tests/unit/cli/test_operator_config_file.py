"""Issue 25, ``--config FILE``: the operator's TOML, keyed by long option names, with the documented precedence
(flags > environment variables > --config > the repository's allowlist, which may only lower budgets), one
line and exit 2 for its mistakes, and the action's ``budgets`` input read the same way."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest

from conftest import repo_script
from prime_ci.cli.commands import main, run
from prime_ci.cli.operator_config import given
from prime_ci.engine.config import RunConfig, build_config, file_settings
from prime_ci.errors import ConfigError
from prime_ci.isolation.limits import Limits, resolve


def operator(tmp_path: Path, toml: str, *args: str) -> dict[str, Any]:
    """The settings ``prime-ci run`` hands to the run, parsed by the command itself."""
    config = tmp_path / "operator.toml"
    config.write_text(toml)
    ctx = run.make_context("run", [str(tmp_path / "repo"), "--config", str(config), *args])
    return given(ctx, ctx.params)


def settled(tmp_path: Path, flags: dict[str, Any], repo_toml: str | None = None) -> tuple[RunConfig, list[str]]:
    """The run's configuration from the operator's settings and the repository's prime-ci.toml."""
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    if repo_toml is not None:
        (repo / "prime-ci.toml").write_text(repo_toml)
    warnings: list[str] = []
    return build_config(flags, file_settings(repo, warnings.append), warnings.append), warnings


BASE = 'task = "fix it"\nmodel = "openai/from-config"\n'


def test_a_config_file_sets_what_the_flags_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRIME_CI_MODEL", raising=False)
    flags = operator(tmp_path, BASE + 'max-turns = 7\nmax_wall = "20m"\ngate = ["pytest -q", "ruff check"]\n'
                     'setup = "make"\ncache = false\njson = true\nsandbox = "off"\nmax-cost = 2\n')
    assert flags == {"repo": str(tmp_path / "repo"), "task": "fix it", "model": "openai/from-config",
                     "max_turns": 7, "max_wall": 1200.0, "gate": ["pytest -q", "ruff check"], "setup": ["make"],
                     "cache": False, "json_output": True, "sandbox": "off", "max_cost": 2.0}
    cfg, warnings = settled(tmp_path, flags | {"price_per_mtok": "1,2"})
    assert (cfg.max_turns, cfg.max_wall, cfg.gate, cfg.cache, cfg.sandbox) == (7, 1200.0, flags["gate"], False, "off")
    assert warnings == []


def test_a_flag_beats_the_environment_which_beats_the_config(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRIME_CI_MODEL", raising=False)
    assert operator(tmp_path, BASE)["model"] == "openai/from-config"
    monkeypatch.setenv("PRIME_CI_MODEL", "openai/from-env")
    assert operator(tmp_path, BASE)["model"] == "openai/from-env"
    assert operator(tmp_path, BASE, "--model", "openai/from-flag")["model"] == "openai/from-flag"
    assert operator(tmp_path, BASE + "max-turns = 7\n", "--max-turns", "9")["max_turns"] == 9


def test_limits_from_the_environment_beat_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PRIME_CI_LIMITS is read where the limits are resolved (its errors name it): the config's limits must not
    reach there over it, and a --limits flag beats both."""
    toml = BASE + 'limits = "pids=100"\n'
    monkeypatch.delenv("PRIME_CI_LIMITS", raising=False)
    assert resolve(operator(tmp_path, toml).get("limits")) == Limits(pids=100)
    monkeypatch.setenv("PRIME_CI_LIMITS", "pids=200")
    assert resolve(operator(tmp_path, toml).get("limits")) == Limits(pids=200)
    assert resolve(operator(tmp_path, toml, "--limits", "pids=300").get("limits")) == Limits(pids=300)
    monkeypatch.setenv("PRIME_CI_LIMITS", "pids=many")
    with pytest.raises(ConfigError, match=r"^PRIME_CI_LIMITS: pids='many'"):
        resolve(operator(tmp_path, toml).get("limits"))


def test_the_config_beats_the_repository_which_may_only_lower_budgets_it_left(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRIME_CI_MODEL", raising=False)
    flags = operator(tmp_path, BASE + 'max-turns = 10\nmax-wall = "20m"\nreasoning-effort = "low"\n')
    cfg, warnings = settled(tmp_path, flags, 'max-turns = 5\nmax-wall = "1h"\nmax-depth = 0\n'
                                             'reasoning-effort = "high"\nmax-children = 9\n')
    assert (cfg.max_turns, cfg.max_wall, cfg.reasoning_effort) == (10, 1200.0, "low")  # the operator's, lower or not
    assert (cfg.max_depth, cfg.max_children) == (0, 4)  # what the operator left to the repository: only lower
    assert len(warnings) == 1 and "max-children = 9 ignored" in warnings[0], warnings
    cfg, _ = settled(tmp_path, operator(tmp_path, BASE + "max-depth = 3\n"))
    assert (cfg.max_turns, cfg.max_depth) == (5, 3)


def test_prime_ci_config_names_the_file_unless_the_flag_does(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "env.toml").write_text("max-turns = 11\n")
    (tmp_path / "flag.toml").write_text("max-turns = 12\n")
    monkeypatch.setenv("PRIME_CI_CONFIG", str(tmp_path / "env.toml"))
    assert given(ctx := run.make_context("run", []), ctx.params)["max_turns"] == 11
    flagged = run.make_context("run", ["--config", str(tmp_path / "flag.toml")])
    assert given(flagged, flagged.params)["max_turns"] == 12


@pytest.mark.parametrize(("toml", "needles"), [
    ("max-turns = 7\nbogus = 1\n", ["unknown key 'bogus'"]),
    ("[run]\nmax-turns = 7\n", ["unknown key 'run'"]),
    ("config = 'other.toml'\n", ["unknown key 'config'"]),
    ("max-turns = 0\n", ["max-turns", "0 is not in the range"]),
    ('max-wall = "5x"\n', ["max-wall", "'5x'"]),
    ('sandbox = "maybe"\n', ["sandbox", "maybe"]),
    ("cache = 'no'\n", ["cache", "true or false"]),
    ("gate = [{ name = 'x' }]\n", ["gate", "expected a string"]),
    ("model = 5\n", ["model", "expected a string"]),
    ("max-turns = 7\nmax_turns = 8\n", ["max_turns", "twice"]),
    ("max-turns = [\n", ["not valid TOML"]),
])
def test_a_mistake_in_the_config_is_exit_2_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], toml: str,
                                                      needles: list[str]) -> None:
    config = tmp_path / "operator.toml"
    config.write_text(toml)
    monkeypatch.setattr(sys, "argv", ["prime-ci", "run", str(tmp_path), "--task", "t", "--config", str(config)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"prime-ci: error: --config {config}: "), lines
    for needle in needles:
        assert needle in lines[0], lines


def test_a_missing_config_file_is_exit_2_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["prime-ci", "run", "--config", str(tmp_path / "none.toml")])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"prime-ci: error: --config {tmp_path / 'none.toml'}: cannot read it: No such " \
                                      "file or directory\n"


# --- the action's budgets input ----------------------------------------------------------------------------------

def action_helper() -> ModuleType:
    return repo_script("action/helper.py")


def test_the_action_budgets_are_the_budgets_panel() -> None:
    budgets = [p.opts[0].removeprefix("--") for p in run.params if getattr(p, "panel", None) == "Budgets"]
    assert list(action_helper().BUDGET_KEYS) == budgets


def test_the_action_budgets_input_is_read_as_a_config_file(tmp_path: Path) -> None:
    helper = action_helper()
    text = helper.budgets("max-turns=30, max-wall=20m\n--max-cost=2 cell-timeout=90")
    flags = operator(tmp_path, text)
    assert {k: flags[k] for k in ("max_turns", "max_wall", "max_cost", "cell_timeout")} == {
        "max_turns": 30, "max_wall": 1200.0, "max_cost": 2.0, "cell_timeout": 90.0}
    with pytest.raises(click.UsageError, match="max-turns: 'many' is not a valid integer"):
        operator(tmp_path, helper.budgets("max-turns=many"))
    with pytest.raises(helper.UsageError, match="unknown key 'model'"):
        helper.budgets("model=openai/x")
