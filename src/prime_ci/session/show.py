"""``prime-ci show``: a session log rendered for a person.

Everything in a session is untrusted text for the reviewer's terminal: a cell's output, or a session file
written by anyone, may hold escape sequences (window titles, clear screen, alternate screen) and text that
looks like rich markup, and bidi controls that show code in another order than it runs (Trojan Source). Every
string read from the session is cleaned of escape sequences, its format characters shown as ``<U+XXXX>``, before
it is rendered, and reaches rich only as ``Text`` or ``Syntax``, never as markup.

A session is a tree (Prime Agent branches it with ``/tree``): the active branch, from the root to the last
entry of the file, is rendered in order; entries off it are listed by id and kind only, after it. Entries
another program appended after prime-ci's last record are rendered under a rule saying so.
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

from prime_ci.isolation.untrusted import clean_json, clean_terminal_text, visible
from prime_ci.session.log import read_session
from prime_ci.session.read import parts_text
from prime_ci.session.show_records import describe
from prime_ci.session.tree import branches

MAX_SHOWN = 3000
_SURROGATE = re.compile("[\ud800-\udfff]")  # undecodable bytes kept as lone surrogates: not printable


def _safe(text: str) -> str:
    return visible(_SURROGATE.sub("\ufffd", clean_terminal_text(text)))


def _clip(text: str) -> str:
    if len(text) <= MAX_SHOWN:
        return text
    half = MAX_SHOWN // 2
    head, tail = text[:half], text[-half:]
    # at whitespace where there is some near the cut: a word is shown whole or not at all
    end = max(head.rfind(" "), head.rfind("\n"))
    head = head[:end] if end > half * 4 // 5 else head
    start = min((i for i in (tail.find(" "), tail.find("\n")) if i >= 0), default=-1)
    tail = tail[start + 1:] if 0 <= start < half // 5 else tail
    return f"{head}\n… {len(text) - len(head) - len(tail)} characters not shown …\n{tail}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


def render(path: Path, console: Console | None = None, *, children: bool = True) -> None:
    """Render one session; then, for a run's root session, each rlm child's session after it."""
    console = console or Console()
    session = read_session(path)
    h: dict[str, Any] = clean_json(session.header, _safe)
    entries: list[Any] = clean_json(session.entries, _safe)
    tree = branches(session.entries)
    depth = f" · rlm depth {h['rlmDepth']}" if h.get("rlmDepth") else ""
    _heading(console, Text.assemble(("session", "bold"), f" {h.get('id')} · v{h.get('version')} · {h.get('timestamp')}"
                               f"{depth}"))
    info = f"cwd {h.get('cwd')} · {_plural(len(entries), 'entry')}"
    if tree.off_branch:
        info += f" · {len(tree.path)} on the active branch, {len(tree.off_branch)} off it"
    if not session.checksummed:  # another program's session, or its copy of a prime-ci log (Prime Agent's fork)
        signed = sum("crc32" in e for e in session.entries)
        info += (f" · header by another program, {signed} of {_plural(len(entries), 'entry')} with prime-ci's "
                 "checksums" if signed else " · no checksums (not written by prime-ci)")
    if h.get("parentSession"):
        info += f" · from {h['parentSession']}"
    console.print(Text(info, style="dim"))
    labels = _labels(entries)
    marked = not session.foreign_suffix
    for i in tree.path:
        if not marked and i >= session.foreign_start:  # the suffix's entries on the path come after all others
            _heading(console, Text(f"appended by another program after prime-ci's last record (no checksums): "
                              f"{_plural(len(session.foreign_suffix), 'entry')}", style="yellow"))
            marked = True
        _entry(console, entries[i], labels)
        if i in tree.forks:
            console.print(Text(f"⑂ {_plural(tree.forks[i], 'off-branch entry')} continue from {entries[i].get('id')} "
                               "(listed after the active branch)", style="dim"))
    _off_branch(console, entries, tree.off_branch, session.foreign_start)
    if tree.relinked:
        console.print(Text(f"{_plural(len(tree.relinked), 'entry')} with a parentId not in the file: each shown "
                           "after the entry before it", style="dim"))
    if session.rewritten:
        console.print(Text(f"{_plural(len(session.rewritten), 'line')} rewritten by another writer (crc32 no longer "
                           f"matches; read as written): line {', '.join(map(str, session.rewritten[:10]))}",
                           style="yellow"))
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


def _heading(console: Console, title: Text) -> None:
    """A rule with ``title`` in it when it fits; else the rule, then the title wrapped (a rule would cut it)."""
    if title.cell_len + 6 <= console.width:
        console.rule(title)
    else:
        console.rule()
        console.print(title)


def _off_branch(console: Console, entries: list[Any], off: list[int], foreign_start: int) -> None:
    if not off:
        return
    _heading(console, Text(f"off the active branch: {_plural(len(off), 'entry')}, not shown", style="dim"))
    for i in off:
        entry = entries[i]
        kind = str(entry.get("type"))
        msg = entry.get("message")
        if kind == "message" and isinstance(msg, dict):
            kind = f"message ({msg.get('role')})"
        elif isinstance(entry.get("customType"), str):
            kind = f"{kind} ({entry['customType']})"
        parent = entry.get("parentId")
        where = " · appended by another program" if i >= foreign_start else ""
        console.print(Text(f"off-branch {entry.get('id')} {kind} · parent {parent}{where}", style="dim"))


def _last_custom(entries: list[Any], custom_type: str) -> dict[str, Any] | None:
    for entry in reversed(entries):
        if entry.get("type") == "custom" and entry.get("customType") == custom_type:
            data = entry.get("data")
            return data if isinstance(data, dict) else {}
    return None


def _labels(entries: list[Any]) -> dict[str, str]:
    """Each entry's current label: the last label entry naming it wins, one without a label clears it."""
    labels: dict[str, str] = {}
    for entry in entries:
        if entry.get("type") == "label" and isinstance(entry.get("targetId"), str):
            if entry.get("label"):
                labels[entry["targetId"]] = str(entry["label"])
            else:
                labels.pop(entry["targetId"], None)
    return labels


def _title(name: str, style: str, entry: dict[str, Any], labels: dict[str, str]) -> Text:
    title = Text(name, style=style)
    eid = entry.get("id")
    if isinstance(eid, str):
        title.append(f" {eid}", style="dim")
        if eid in labels:
            title.append(f" [label: {labels[eid]}]", style="bold")
    return title


def _line(console: Console, text: str, entry: dict[str, Any], labels: dict[str, str]) -> None:
    eid = entry.get("id")
    label = f" [label: {labels[eid]}]" if isinstance(eid, str) and eid in labels else ""
    console.print(Text(f"· {text}{label}", style="dim"))


def _panel(console: Console, body: Text | Syntax, title: Text, style: str, subtitle: str = "") -> None:
    console.print(Panel(body, title=title, title_align="left", border_style=style,
                        subtitle=Text(subtitle, style="dim") if subtitle else None, subtitle_align="left"))


def _entry(console: Console, entry: dict[str, Any], labels: dict[str, str]) -> None:
    kind = entry.get("type")
    if kind == "message" and isinstance(entry.get("message"), dict):
        _message(console, entry["message"], entry, labels)
    elif kind == "custom_message":
        _panel(console, Text(_clip(parts_text(entry.get("content", "")))),
               _title(str(entry.get("customType")), "yellow", entry, labels), "yellow")
    elif kind == "custom":
        _line(console, describe(str(entry.get("customType")), entry.get("data", {})), entry, labels)
    elif kind == "compaction":
        kept = f"kept from {entry.get('firstKeptEntryId')}" if entry.get("firstKeptEntryId") else ""
        before = f"{entry.get('tokensBefore')} tokens before · " if entry.get("tokensBefore") is not None else ""
        _panel(console, Text(_clip(str(entry.get("summary", "")))), _title("compaction", "magenta", entry, labels),
               "magenta", before + kept)
    elif kind == "branch_summary":
        _panel(console, Text(_clip(str(entry.get("summary", "")))),
               _title("summary of an abandoned branch", "magenta", entry, labels), "magenta",
               f"branched from {entry.get('fromId')}")
    elif kind == "label":
        what = f'"{entry["label"]}"' if entry.get("label") else "cleared"
        _line(console, f"label {what} on {entry.get('targetId')}", entry, labels)
    elif kind == "model_change":
        _line(console, f"model: {entry.get('provider')}/{entry.get('modelId')}", entry, labels)
    elif kind == "thinking_level_change":
        _line(console, f"thinking level: {entry.get('thinkingLevel')}", entry, labels)
    elif kind == "service_tier_change":
        _line(console, f"service tier: {entry.get('serviceTier')}", entry, labels)
    elif kind == "child_usage_attributed":
        usage = entry.get("childUsage")
        tokens = usage.get("totalTokens") if isinstance(usage, dict) else None
        source = entry.get("usageSource")  # prime-ci's own non-turn calls: the aggregate grew, no child's usage
        text = f"{source} usage folded into {entry.get('targetId')}" if source else \
            f"child usage attributed to {entry.get('targetId')}: {tokens} tokens"
        _line(console, text, entry, labels)
    elif kind == "session_info":
        _line(console, f"session name: {entry.get('name') or '(cleared)'}", entry, labels)
    else:
        _line(console, f"{kind} {entry.get('id', '')}".rstrip(), entry, labels)


def _message(console: Console, msg: dict[str, Any], entry: dict[str, Any], labels: dict[str, str]) -> None:
    role = msg.get("role")
    content = msg.get("content", [])
    if role == "assistant":
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "thinking" and part.get("thinking"):
                console.print(Panel(Text(_clip(str(part["thinking"])), style="italic"),
                                    title=Text("thinking", style="dim"), title_align="left", border_style="dim"))
        text = parts_text(content)
        if text:
            _panel(console, Text(_clip(text)), _title("assistant", "cyan", entry, labels), "cyan")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "toolCall":
                args = part.get("arguments")
                code = args.get("code") if isinstance(args, dict) and "code" in args else json.dumps(args)
                _panel(console, Syntax(_clip(str(code)), "python", word_wrap=True),
                       Text(str(part.get("name")), style="cyan"), "blue")
    elif role == "toolResult":
        style = "red" if msg.get("isError") else "green"
        _panel(console, Text(_clip(parts_text(content))), _title("result", style, entry, labels), style)
    elif role == "bashExecution":
        _bash(console, msg, entry, labels)
    elif role == "custom":
        _panel(console, Text(_clip(parts_text(content))), _title(str(msg.get("customType")), "yellow", entry, labels),
               "yellow")
    elif "content" not in msg and "summary" in msg:  # branchSummary, compactionSummary
        _panel(console, Text(_clip(str(msg["summary"]))), _title(str(role), "magenta", entry, labels), "magenta")
    else:
        console.print(Panel(Text(_clip(parts_text(content))), title=_title(str(role), "bold", entry, labels),
                            title_align="left"))


def _bash(console: Console, msg: dict[str, Any], entry: dict[str, Any], labels: dict[str, str]) -> None:
    """Prime Agent's ``!command``: a shell command the user ran; ``!!`` keeps it out of the model's context."""
    notes = ["cancelled" if msg.get("cancelled") else f"exit {msg.get('exitCode')}"]
    if msg.get("truncated"):
        notes.append(f"output truncated (full output: {msg.get('fullOutputPath')})")
    if msg.get("excludeFromContext"):
        notes.append("not sent to the model")
    style = "green" if msg.get("exitCode") == 0 and not msg.get("cancelled") else "red"
    body = Text(f"$ {msg.get('command', '')}\n", style="bold")
    body.append(_clip(str(msg.get("output", ""))), style="")
    _panel(console, body, _title("shell", style, entry, labels), style, " · ".join(notes))
