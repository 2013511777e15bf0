"""``prime-ci show``: a session log rendered for a person."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from prime_ci.session import read_session
from prime_ci.session_read import parts_text

MAX_SHOWN = 3000


def _clip(text: str) -> str:
    if len(text) <= MAX_SHOWN:
        return text
    half = MAX_SHOWN // 2
    return f"{text[:half]}\n… {len(text) - MAX_SHOWN} characters not shown …\n{text[-half:]}"


def render(path: Path, console: Console | None = None, *, children: bool = True) -> None:
    """Render one session; then, for a run's root session, each rlm child's session after it."""
    console = console or Console()
    session = read_session(path)
    h = session.header
    depth = f" · rlm depth {h['rlmDepth']}" if h.get("rlmDepth") else ""
    console.rule(f"[bold]session[/] {h.get('id')} · v{h.get('version')} · {h.get('timestamp')}{depth}")
    console.print(f"[dim]cwd {h.get('cwd')} · {len(session.entries)} entries[/]")
    for entry in session.entries:
        kind = entry.get("type")
        if kind == "message":
            _message(console, entry["message"])
        elif kind == "custom_message":
            console.print(Panel(_clip(parts_text(entry.get("content", ""))), title=f"[yellow]{entry.get('customType')}",
                                title_align="left", border_style="yellow"))
        elif kind == "custom":
            data = json.dumps(entry.get("data", {}), ensure_ascii=False)
            console.print(Text(f"· {entry.get('customType')}: {data[:200]}", style="dim"))
        elif kind == "compaction":
            console.print(Panel(_clip(str(entry.get("summary", ""))), title="[magenta]compaction", title_align="left"))
        else:
            console.print(Text(f"· {kind}", style="dim"))
    for offset, reason in session.bad_lines:
        console.print(f"[red]unreadable line at byte {offset}: {reason}[/]")
    if session.torn_tail:
        console.print(f"[red]torn last line ({len(session.torn_tail)} bytes) ignored[/]")
    stop = session.last_custom("prime_ci.stop")
    if stop is not None:
        console.print(f"[bold]stop:[/] {stop.get('stop_reason')} (exit {stop.get('exit_code')}) "
                      f"{stop.get('detail', '')}")
    child_dir = path.parent / "children"
    if children and child_dir.is_dir():
        for child in sorted(child_dir.glob("*/session.jsonl")):
            render(child, console, children=False)


def _message(console: Console, msg: dict[str, Any]) -> None:
    role = msg.get("role")
    if role == "assistant":
        text = parts_text(msg.get("content", []))
        if text:
            console.print(Panel(_clip(text), title="[cyan]assistant", title_align="left", border_style="cyan"))
        for part in msg.get("content", []):
            if part.get("type") == "toolCall":
                code = part.get("arguments", {}).get("code", json.dumps(part.get("arguments")))
                console.print(Panel(Syntax(_clip(str(code)), "python", word_wrap=True),
                                    title=f"[cyan]{part.get('name')}", title_align="left", border_style="blue"))
    elif role == "toolResult":
        style = "red" if msg.get("isError") else "green"
        console.print(Panel(_clip(parts_text(msg.get("content", []))), title=f"[{style}]result", title_align="left",
                            border_style=style))
    else:
        console.print(Panel(_clip(parts_text(msg.get("content", ""))), title=f"[bold]{role}", title_align="left"))
