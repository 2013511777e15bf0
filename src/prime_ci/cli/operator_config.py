"""``--config FILE`` (or ``PRIME_CI_CONFIG``): the operator's settings in TOML, keyed by long option names.

The file fills click's default map, so a value in it counts where the option's default would: flags and
environment variables win over it, and it wins over the repository's ``prime-ci.toml`` (an allowlist that may
only lower budgets, applied later with the other operator settings). Each value is checked by its option's own
type, so a file takes what the command line takes; values mean what they mean there (paths are relative to the
working directory). An unknown key, a malformed value or a file that is not TOML is exit 2, in one line.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

# where an operator's setting came from (the repository's settings are read later, from the worktree)
OPERATOR = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT_MAP)
_TEXT_TYPES = (click.types.StringParamType, click.Path, click.Choice)


def load_config(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    """The ``--config`` option's callback (eager: it runs before the options it sets)."""
    if value is None or ctx.resilient_parsing:
        return
    ctx.default_map = {**(ctx.default_map or {}), **read(value, ctx)}


def read(path: Path, ctx: click.Context) -> dict[str, Any]:
    """The file's settings by parameter name, each converted by its option's type."""
    where = f"--config {path}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise click.UsageError(f"{where}: cannot read it: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"{where}: not valid TOML ({str(exc).splitlines()[0]})") from None
    known = keys(ctx.command)
    out: dict[str, Any] = {}
    for key, value in data.items():
        option = known.get(key.replace("_", "-"))
        if option is None:
            raise click.UsageError(f"{where}: unknown key {key!r}")
        assert option.name is not None
        if option.name in out:
            raise click.UsageError(f"{where}: {key!r} is set twice")
        out[option.name] = _convert(option, value, ctx, f"{where}: {key}")
    return out


def keys(command: click.Command) -> dict[str, click.Option]:
    """The keys a file may set: each option's long names without the dashes (not ``config`` itself)."""
    return {name[2:]: p for p in command.params if isinstance(p, click.Option) and p.name != "config"
            for name in p.opts if name.startswith("--")}


def _convert(option: click.Option, value: Any, ctx: click.Context, where: str) -> Any:
    if option.is_flag:
        if not isinstance(value, bool):
            raise click.UsageError(f"{where}: expected true or false, got {value!r}")
        return value
    items = value if option.multiple and isinstance(value, list) else [value]
    text = isinstance(option.type, _TEXT_TYPES)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str if text else str | int | float):
            wanted = "a string" if text else "a number or a string"
            raise click.UsageError(f"{where}: expected {wanted}{' or a list of them' if option.multiple else ''}, "
                                   f"got {item!r}")
    try:
        return option.type_cast_value(ctx, items if option.multiple else value)
    except click.BadParameter as exc:
        raise click.UsageError(f"{where}: {exc.message}") from None


def given(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """The arguments and the settings the operator gave (flags, environment variables, ``--config``): what the
    repository's settings may not override. Lists as lists."""
    arguments = {p.name for p in ctx.command.params if isinstance(p, click.Argument)}
    flags = {name: list(value) if isinstance(value, tuple) else value for name, value in params.items()
             if ctx.get_parameter_source(name) in OPERATOR or name in arguments}
    if ctx.get_parameter_source("limits") is ParameterSource.ENVIRONMENT:
        del flags["limits"]  # resolved where it is used, from PRIME_CI_LIMITS, whose errors name the variable
    return flags
