"""The README's command-line reference: every visible command's ``--help``, written between two markers by the
hidden ``prime-ci dev-flag-reference`` (``--check``: exit 1 when the README differs from ``--help``)."""

from __future__ import annotations

from pathlib import Path

import click

from prime_ci.cli.app import cli, say_plain

BEGIN = "<!-- flag reference: generated from --help by `prime-ci dev-flag-reference README.md`; do not edit -->"
END = "<!-- end of the flag reference -->"
WIDTH = 100  # fixed, so that the text does not depend on the terminal that generates it


def commands(group: click.Group, ctx: click.Context) -> list[tuple[click.Command, click.Context]]:
    """Each visible command under ``group`` with the context its help is rendered in, depth first."""
    out: list[tuple[click.Command, click.Context]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        out.append((command, sub))
        if isinstance(command, click.Group):
            out += commands(command, sub)
    return out


def reference() -> str:
    """The generated section, markers included."""
    root = click.Context(cli, info_name="prime-ci", terminal_width=WIDTH, max_content_width=WIDTH,
                         **{k: v for k, v in cli.context_settings.items() if k != "max_content_width"})
    parts = [BEGIN]
    for command, ctx in commands(cli, root):
        summary = command.get_short_help_str(limit=WIDTH).replace("<", "&lt;")
        parts.append(f"<details><summary><code>{ctx.command_path}</code>: {summary}</summary>\n\n"
                     f"```text\n{command.get_help(ctx)}\n```\n\n</details>")
    parts.append(END)
    return "\n\n".join(parts)


def replaced(text: str, section: str) -> str:
    """``text`` with what lies between the markers (included) replaced by ``section``."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise click.UsageError(f"the README has no flag reference markers ({BEGIN} ... {END})")
    return text[:start] + section + text[end + len(END):]


@cli.command("dev-flag-reference", hidden=True)
@click.argument("readme", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=Path("README.md"))
@click.option("--check", is_flag=True, help="Change nothing: exit 1 when the reference differs from --help.")
def dev_flag_reference(readme: Path, check: bool) -> int:
    """Development: write the command-line reference into README between its markers."""
    text = readme.read_text(encoding="utf-8")
    new = replaced(text, reference())
    if check:
        if new != text:
            say_plain(f"{readme}: the flag reference differs from --help: run prime-ci dev-flag-reference {readme}")
            return 1
        return 0
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return 0
