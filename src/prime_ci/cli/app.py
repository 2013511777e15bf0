"""The click group, the progress line printer and the host set-up shared by every command."""

from __future__ import annotations

import functools
import json
import signal
import sys
from typing import Any

import click

from prime_ci import __version__
from prime_ci.cli.actions_stream import json_for_stdout, write_command
from prime_ci.cli.status import above
from prime_ci.durations import format_duration


@functools.cache
def console() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def say(text: str) -> None:
    from prime_ci.isolation.untrusted import visible

    text = visible(text)  # names and commands from the repository: bidi and control characters shown, not obeyed
    with above():  # a run's live status line is cleared, then drawn again below the line
        _print(text)


def _print(text: str) -> None:
    if sys.stderr.isatty():
        console().print(f"[dim]prime-ci:[/dim] {text}", markup=True)
    else:  # CI logs: plain lines, without rich's per-line rendering cost (nor its markup parser if no tags)
        if "[" in text:
            from rich.markup import render

            text = render(text).plain
        sys.stderr.write(f"prime-ci: {text}\n")
        sys.stderr.flush()


def say_plain(text: str) -> None:
    """``say`` for text that is not markup: commands, paths, output (``-e .[testing]`` stays as written)."""
    from rich.markup import escape

    say(escape(text))


def quiet_say(text: str) -> None:
    """``-q``: a line is printed only when it is a warning."""
    if text.startswith("warning:"):
        say_plain(text)


def workflow_command(line: str) -> None:
    """prime-ci's own GitHub Actions workflow command(s) (``::group::``, ``::error``, built by
    ``isolation.workflow_commands``) on stdout, where the runner reads them, after what the console said so far;
    the one way past the guard on stdout (``actions_stream``)."""
    write_command(line)


def echo_json(text: str) -> None:
    """A JSON document on stdout (``--json``): in an Actions log no value in it can be read as a command."""
    click.echo(json_for_stdout(text))


def host_setup() -> None:
    """Secrets to mask in every artifact; adopt orphans (setsid escapees) so they can be reaped; SIGTERM
    before the event loop takes it over (cloning, preparing) unwinds like Ctrl-C: the temp worktree is removed,
    exit 130, instead of dying with a clone left behind (a CI cancel, a bench stopping its runs)."""
    from prime_ci.isolation import redact
    from prime_ci.isolation.dumpable import make_undumpable
    from prime_ci.isolation.procs import enable_subreaper

    redact.register_environment()
    enable_subreaper()
    make_undumpable()
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# stops whose reason is not the work's: their one-line detail follows the verdict
EXPLAINED = ("model_error", "setup_failed", "sandbox_unavailable", "environment_error")


def print_outcome(result: dict[str, Any], as_json: bool) -> int:
    code = int(result["exit_code"])
    color = "green" if code == 0 else "red"
    usage = result["usage"]
    from rich.markup import escape

    say(f"[bold {color}]{result['stop_reason']}[/] (exit {code}) · {usage['turns']} turns · "
        f"{usage['total_tokens']} tokens · {format_duration(result['wall_s'])} · "
        f"artifacts: {escape(str(result['out_dir']))}")
    if result["stop_reason"] in EXPLAINED and result.get("detail"):
        say(f"{result['stop_reason']}: {escape(str(result['detail']).splitlines()[0])}")
    if as_json:
        echo_json(json.dumps(result, indent=2))
    return code


HELP_OPTIONS = ["-h", "--help"]


class Commands(click.Group):
    """Every command, at any depth, takes ``-h`` in any context made for it: click makes a command's help option
    once, from the first context asked, and a context made without the group's (``make_context``) had only
    ``--help``."""

    group_class = type

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.context_settings.setdefault("help_option_names", HELP_OPTIONS)
        super().add_command(cmd, name)


@click.group(cls=Commands, context_settings={"help_option_names": HELP_OPTIONS, "max_content_width": 110})
@click.version_option(__version__, prog_name="prime-ci")
def cli() -> None:
    """prime-ci: let a model work on a repository in CI until quality gates pass or a budget runs out."""
