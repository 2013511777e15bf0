"""``prime-ci show``: a session log rendered for a person.

Everything in a session is untrusted text for the reviewer's terminal: a cell's output, or a session file
written by anyone, may hold escape sequences (window titles, clear screen, alternate screen) and text that
looks like rich markup. Every string read from the session is cleaned of control characters before it is
rendered, and reaches rich only as ``Text`` or ``Syntax``, never as markup.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from prime_ci.isolation.untrusted import clean_json, clean_terminal_text
from prime_ci.session.log import read_session
from prime_ci.session.read import parts_text

MAX_SHOWN = 3000
_SURROGATE = re.compile("[\ud800-\udfff]")  # undecodable bytes kept as lone surrogates: not printable


def _safe(text: str) -> str:
    return _SURROGATE.sub("\ufffd", clean_terminal_text(text))


def _clip(text: str) -> str:
    if len(text) <= MAX_SHOWN:
        return text
    half = MAX_SHOWN // 2
    return f"{text[:half]}\n… {len(text) - MAX_SHOWN} characters not shown …\n{text[-half:]}"


def render(path: Path, console: Console | None = None, *, children: bool = True) -> None:
    """Render one session; then, for a run's root session, each rlm child's session after it."""
    console = console or Console()
    session = read_session(path)
    h: dict[str, Any] = clean_json(session.header, _safe)
    entries: list[Any] = clean_json(session.entries, _safe)
    depth = f" · rlm depth {h['rlmDepth']}" if h.get("rlmDepth") else ""
    console.rule(Text.assemble(("session", "bold"), f" {h.get('id')} · v{h.get('version')} · {h.get('timestamp')}"
                               f"{depth}"))
    console.print(Text(f"cwd {h.get('cwd')} · {len(entries)} entries", style="dim"))
    for entry in entries:
        kind = entry.get("type")
        if kind == "message" and isinstance(entry.get("message"), dict):
            _message(console, entry["message"])
        elif kind == "custom_message":
            console.print(Panel(Text(_clip(parts_text(entry.get("content", "")))),
                                title=Text(str(entry.get("customType")), style="yellow"), title_align="left",
                                border_style="yellow"))
        elif kind == "custom":
            data = json.dumps(entry.get("data", {}), ensure_ascii=False)
            console.print(Text(f"· {entry.get('customType')}: {data[:200]}", style="dim"))
        elif kind == "compaction":
            console.print(Panel(Text(_clip(str(entry.get("summary", "")))), title=Text("compaction", style="magenta"),
                                title_align="left"))
        else:
            console.print(Text(f"· {kind}", style="dim"))
    for offset, reason in session.bad_lines:
        console.print(Text(f"unreadable line at byte {offset}: {_safe(reason)}", style="red"))
    if session.torn_tail:
        console.print(Text(f"torn last line ({len(session.torn_tail)} bytes) ignored", style="red"))
    stop = _last_custom(entries, "prime_ci.stop")
    if stop is not None:
        console.print(Text.assemble(("stop:", "bold"), f" {stop.get('stop_reason')} (exit {stop.get('exit_code')}) "
                                                       f"{stop.get('detail', '')}"))
    child_dir = path.parent / "children"
    if children and child_dir.is_dir():
        for child in sorted(child_dir.glob("*/session.jsonl")):
            render(child, console, children=False)


def _last_custom(entries: list[Any], custom_type: str) -> dict[str, Any] | None:
    for entry in reversed(entries):
        if entry.get("type") == "custom" and entry.get("customType") == custom_type:
            data = entry.get("data")
            return data if isinstance(data, dict) else {}
    return None


def _message(console: Console, msg: dict[str, Any]) -> None:
    role = msg.get("role")
    if role == "assistant":
        for part in msg.get("content", []):
            if isinstance(part, dict) and part.get("type") == "thinking" and part.get("thinking"):
                console.print(Panel(Text(_clip(str(part["thinking"])), style="italic"),
                                    title=Text("thinking", style="dim"), title_align="left", border_style="dim"))
        text = parts_text(msg.get("content", []))
        if text:
            console.print(Panel(Text(_clip(text)), title=Text("assistant", style="cyan"), title_align="left",
                                border_style="cyan"))
        for part in msg.get("content", []):
            if isinstance(part, dict) and part.get("type") == "toolCall":
                args = part.get("arguments")
                code = args.get("code") if isinstance(args, dict) and "code" in args else json.dumps(args)
                console.print(Panel(Syntax(_clip(str(code)), "python", word_wrap=True),
                                    title=Text(str(part.get("name")), style="cyan"), title_align="left",
                                    border_style="blue"))
    elif role == "toolResult":
        style = "red" if msg.get("isError") else "green"
        console.print(Panel(Text(_clip(parts_text(msg.get("content", [])))), title=Text("result", style=style),
                            title_align="left", border_style=style))
    else:
        console.print(Panel(Text(_clip(parts_text(msg.get("content", "")))), title=Text(str(role), style="bold"),
                            title_align="left"))
