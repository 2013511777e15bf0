"""Issue 25, the command line declared once: panels in --help, defaults and types tied to the run configuration
model, the duration type, options shared across commands, and the README reference generated from --help."""

from __future__ import annotations

import io
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import click
import pytest
from annotated_types import Ge, Gt
from click.testing import CliRunner

from prime_ci.cli import cli
from prime_ci.cli.commands import run
from prime_ci.cli.params import DURATION, PANELS, PanelOption
from prime_ci.cli.reference import reference, replaced
from prime_ci.durations import format_duration
from prime_ci.engine.config import RunConfig

ROOT = Path(__file__).resolve().parents[3]
RUN_PANELS = ["Task", "Model", "Budgets", "Gates", "Environment", "Harness", "Output"]


def help_of(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def sections(text: str) -> dict[str, list[str]]:
    """Help text by section heading ("Budgets:"), each the option names its lines start with."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][a-z]+:", line):
            current = line[:-1]
            out[current] = []
        elif current and (m := re.match(r"  (-\w, )?(--[\w-]+)", line)):
            out[current].append(m.group(2))
    return out


def test_run_help_groups_the_options_into_panels_in_order() -> None:
    found = sections(help_of("run"))
    assert list(found) == [*RUN_PANELS, "Options"]
    assert found["Budgets"] == ["--max-turns", "--max-tokens", "--max-wall", "--max-cost", "--cell-timeout",
                                "--max-gate-retries", "--max-depth", "--max-children"]
    assert {"--model", "--api-base", "--model-timeout"} <= set(found["Model"])
    assert {"--task", "--task-file", "--ref"} <= set(found["Task"])
    assert {"--sandbox", "--python", "--setup", "--limits"} <= set(found["Environment"])
    assert found["Options"] == ["--config", "--help"]
    every = [name for names in found.values() for name in names]
    assert len(every) == len(set(every)) == len([p for p in run.params if isinstance(p, click.Option)]) + 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _root() -> click.Context:
    """The group's context: a command's help option is made once, from the first context asked (click caches
    it), and only under the group's does it have ``-h``: a parentless context here would change the reference."""
    return click.Context(cli, info_name="prime-ci", help_option_names=["-h", "--help"])


def test_on_a_terminal_the_panels_are_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", _Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    ctx = click.Context(run, info_name="run", terminal_width=100, parent=_root())
    plain = re.sub(r"\x1b\[[0-9;]*m", "", run.get_help(ctx))
    tops = [m.group(1) for m in re.finditer(r"╭─ (\w+) ─", plain)]
    assert tops == [*RUN_PANELS, "Options"]
    budgets = plain[plain.index("╭─ Budgets"):plain.index("╭─ Gates")]
    assert "│ --max-wall DURATION" in budgets and "[default: 30m]" in budgets
    monkeypatch.setenv("NO_COLOR", "1")
    assert "╭─" not in run.get_help(ctx) and "\nBudgets:\n" in run.get_help(ctx)


def test_every_run_option_is_in_one_of_the_named_panels() -> None:
    panels = {p.name: p.panel for p in run.params if isinstance(p, PanelOption)}
    assert len(panels) == len([p for p in run.params if isinstance(p, click.Option)])
    assert {v for k, v in panels.items() if k != "config"} == set(RUN_PANELS) <= set(PANELS)


# --- defaults and types: --help against the run configuration model ------------------------------------------

DURATIONS = set(RunConfig.__pydantic_decorators__.field_validators["_duration"].info.fields)
NOT_OPTIONS = {"repo": "the REPO argument", "limits": "--limits SPEC, parsed into Limits where it is used"}


def _shown_default(record: str) -> str | None:
    m = re.search(r"\[(?:[^\]]*; )?default: ([^;\]]*)[;\]]", record)
    return m.group(1) if m else None


def _expected_default(name: str, option: click.Option) -> str | None:
    value = RunConfig.model_fields[name].get_default(call_default_factory=True)
    if value is None or value == [] or value is False:
        return None
    if value is True:
        return option.opts[0].removeprefix("--")
    return format_duration(value) if name in DURATIONS else str(value)


def _check_type(name: str, option: click.Option) -> None:
    field = RunConfig.model_fields[name]
    annotation: Any = field.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0] if len(args) == 1 else annotation
    if typing.get_origin(annotation) is list:
        assert option.multiple, name
        return
    assert not option.multiple, name
    if typing.get_origin(annotation) is typing.Literal:
        assert isinstance(option.type, click.Choice) and list(option.type.choices) == list(
            typing.get_args(annotation)), name
    elif annotation is bool:
        assert option.is_flag and option.is_bool_flag, name
    elif name in DURATIONS:
        assert option.type is DURATION and annotation is float, name
    elif annotation is int:
        assert isinstance(option.type, click.types.IntParamType), name
    elif annotation is float:
        assert isinstance(option.type, click.types.FloatParamType), name
    elif annotation is Path:
        assert isinstance(option.type, click.Path), name
    else:
        assert annotation is str and isinstance(option.type, click.types.StringParamType), (name, option.type)
    for bound in field.metadata:  # the model's range is the option's
        if isinstance(bound, Ge):
            assert isinstance(option.type, click.IntRange) and option.type.min == bound.ge, name
        if isinstance(bound, Gt):
            assert isinstance(option.type, click.FloatRange) and option.type.min == bound.gt, name
            assert option.type.min_open, name


def test_every_run_setting_is_an_option_whose_help_shows_the_model_default_and_type() -> None:
    options = {p.name: p for p in run.params if isinstance(p, click.Option) and p.name != "config"}
    assert set(options) == set(RunConfig.model_fields) - {"repo"}
    assert "repo" in {p.name for p in run.params if isinstance(p, click.Argument)}
    ctx = click.Context(run, info_name="run", parent=_root())
    records = {name: option.get_help_record(ctx) for name, option in options.items()}
    text = help_of("run")
    for name, option in options.items():
        if name in NOT_OPTIONS:
            continue
        record = records[name]
        assert record is not None and record[1].split("[")[0].strip() in " ".join(text.split()), name
        assert _shown_default(record[1]) == _expected_default(name, option), (name, record)
        _check_type(name, option)
        if name in DURATIONS:
            assert record[0].endswith(" DURATION"), record
    assert not re.search(r"--(max-wall|cell-timeout|model-timeout|gate-timeout) TEXT", text)


def test_an_option_shared_by_commands_is_one_declaration() -> None:
    """The same long name means the same option (type, environment variable, default, repeatable) in every
    command that takes it, except where a command's option is a different thing under the same name."""
    different = {("bench", "--harness"), ("bench", "--out"), ("refine", "--harness")}
    seen: dict[str, tuple[str, tuple[Any, ...]]] = {}
    ctx = click.Context(cli, info_name="prime-ci")
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        for p in command.params:
            if not isinstance(p, click.Option) or (name, p.opts[0]) in different:
                continue
            sub = click.Context(command, info_name=name, parent=ctx)
            shape = (p.name, repr(p.type), p.envvar, p.multiple, p.is_flag, p.get_default(sub, call=False))
            first = seen.setdefault(p.opts[0], (name, shape))
            assert first[1] == shape, (p.opts[0], first[0], name)
    assert {"--model", "--api-base", "--sandbox", "--python", "--gate", "--json"} <= set(seen)


# --- the duration type -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "seconds"), [
    ("30m", 1800.0), ("90s", 90.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("45", 45.0), ("2.5", 2.5), (120, 120.0),
    (" 2m ", 120.0),
])
def test_a_duration_takes_units_or_plain_seconds(given: Any, seconds: float) -> None:
    assert DURATION.convert(given, None, None) == seconds


@pytest.mark.parametrize("given", ["5x", "0", "-1", "", "m", "1h-5m", "1e400", True])
def test_a_bad_duration_is_refused_with_its_value(given: Any) -> None:
    with pytest.raises(click.BadParameter, match="duration"):
        DURATION.convert(given, None, None)


def test_a_duration_flag_reaches_the_settings_in_seconds() -> None:
    ctx = run.make_context("run", ["--max-wall", "1h30m", "--cell-timeout", "90", "--gate-timeout", "2m"])
    assert (ctx.params["max_wall"], ctx.params["cell_timeout"], ctx.params["gate_timeout"]) == (5400, 90, 120)
    result = CliRunner().invoke(cli, ["run", "--task", "t", "--max-wall", "20 minutes"], standalone_mode=False)
    assert isinstance(result.exception, click.BadParameter)
    assert "'--max-wall'" in result.exception.format_message() and "20 minutes" in str(result.exception)


# --- the README's reference ------------------------------------------------------------------------------------

def test_the_readme_flag_reference_is_what_help_says() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert replaced(readme, reference()) == readme, "README drifted from --help: run prime-ci dev-flag-reference"
    for command in ("prime-ci run", "prime-ci gates", "prime-ci bench", "prime-ci harness rollback"):
        assert f"<code>{command}</code>" in readme
    assert "Budgets:\n  --max-turns N" in readme


def test_the_reference_command_writes_and_checks_the_section(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n" + reference().replace("--max-turns N", "--max-turns COUNT") + "\n\nafter\n")
    runner = CliRunner()
    checked = runner.invoke(cli, ["dev-flag-reference", "--check", str(readme)], standalone_mode=False)
    assert checked.return_value == 1
    assert runner.invoke(cli, ["dev-flag-reference", str(readme)], standalone_mode=False).return_value == 0
    assert readme.read_text() == "# x\n\n" + reference() + "\n\nafter\n"
    assert runner.invoke(cli, ["dev-flag-reference", "--check", str(readme)],
                         standalone_mode=False).return_value == 0
