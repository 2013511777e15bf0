"""How options are declared and shown: ``Opt`` (one declaration, shared by the commands that take it), the
duration type, defaults read from the run configuration model, and help grouped into panels."""

from __future__ import annotations

import functools
import io
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

from prime_ci.durations import format_duration, parse_duration
from prime_ci.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

# the order panels are shown in; a panel not listed comes after these, "Options" (--config, --help) last
PANELS = ("Suite", "Task", "Model", "Budgets", "Gates", "Environment", "Harness", "Output")
OTHER = "Options"
# RunConfig field defaults for an option declared with ``default=FROM_RUN_CONFIG``: one place for them
FROM_RUN_CONFIG: Any = object()


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic only in recent click
    """``90s``, ``20m``, ``1h30m``, ``1.5h`` or plain seconds, to seconds (a float > 0)."""

    name = "duration"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return parse_duration(value, what="duration")
        except ConfigError as exc:
            self.fail(str(exc).removeprefix("duration: "), param, ctx)


DURATION = Duration()


class HttpUrl(click.types.StringParamType):
    """A provider's base URL: ``http://`` or ``https://`` and a host. Checked as the option is read, so a URL without
    its scheme (``localhost:8080``) is exit 2 before anything is cloned, not a model error after retries."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        parts = urlsplit(text)
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            self.fail(f"expected an http:// or https:// URL, got {text!r} (e.g. http://localhost:8080/v1)", param,
                      ctx)
        return text


HTTP_URL = HttpUrl()


@functools.cache
def run_defaults() -> dict[str, Any]:
    """The run configuration model's defaults by field name (imported when a default is needed, not before)."""
    from prime_ci.engine.config import RunConfig

    return {name: field.get_default(call_default_factory=True) for name, field in RunConfig.model_fields.items()}


class PanelOption(click.Option):
    """A click option with a help panel; its default may come from the run configuration model."""

    def __init__(self, *decls: Any, panel: str = OTHER, **attrs: Any) -> None:
        self.panel = panel
        self.from_run_config = attrs.get("default") is FROM_RUN_CONFIG
        if self.from_run_config:
            del attrs["default"]
            attrs.setdefault("show_default", True)
        super().__init__(*decls, **attrs)

    def get_default(self, ctx: click.Context, call: bool = True) -> Any:
        if self.from_run_config and self.name is not None:
            return run_defaults()[self.name]
        return super().get_default(ctx, call=call)

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        default = self.get_default(ctx, call=False)
        if isinstance(self.type, Duration) and isinstance(default, int | float) and "default" in extra:
            extra["default"] = format_duration(default)
        return extra


class Opt:
    """One option's declaration. Applied as a decorator; ``Opt.but(help=...)`` is the same option (names, type,
    default, environment variable) with another text for one command."""

    def __init__(self, *decls: str, panel: str = OTHER, **attrs: Any) -> None:
        self.decls, self.panel, self.attrs = decls, panel, attrs

    def but(self, **changes: Any) -> Opt:
        return Opt(*self.decls, panel=changes.pop("panel", self.panel), **{**self.attrs, **changes})

    def __call__(self, f: F) -> F:
        return click.option(*self.decls, cls=PanelOption, panel=self.panel, **self.attrs)(f)


def options(opts: Iterable[Opt]) -> Callable[[F], F]:
    """Apply a list of declarations in their order (shown in that order within each panel)."""
    def apply(f: F) -> F:
        for opt in reversed(list(opts)):
            f = opt(f)
        return f
    return apply


class PanelCommand(click.Command):
    """A command whose options are shown in panels (each option's ``panel``), in the order of ``PANELS``: boxes
    drawn by rich on a terminal, plain sections elsewhere (pipes, CI logs, the README's reference)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        groups = panels(self, ctx)
        if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
            formatter.write_paragraph()
            formatter.write(boxes(groups, formatter.width))
            return
        for title, records in groups:
            with formatter.section(title):
                formatter.write_dl(records)


def boxes(groups: list[tuple[str, list[tuple[str, str]]]], width: int) -> str:
    """The panels drawn by rich, as text with terminal colour codes."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=width, highlight=False)
    for title, records in groups:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for name, text in records:
            table.add_row(Text(name), Text(text))
        console.print(Panel(table, title=title, title_align="left", border_style="dim"))
    return buffer.getvalue()


def panels(command: click.Command, ctx: click.Context) -> list[tuple[str, list[tuple[str, str]]]]:
    """(panel title, help records) in the order they are shown."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None and isinstance(param, click.Option):
            groups.setdefault(getattr(param, "panel", OTHER), []).append(record)
    order = [*PANELS, *sorted(set(groups) - {*PANELS, OTHER}), OTHER]
    return [(title, groups[title]) for title in order if title in groups]
