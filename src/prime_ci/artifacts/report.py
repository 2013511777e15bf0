"""result.json and summary.md contents (files are written by ``artifacts.durable``; stop reasons and exit codes
are ``engine.stops``)."""

from __future__ import annotations

import re
from typing import Any

from prime_ci.durations import format_duration
from prime_ci.gates.junit import ended
from prime_ci.isolation.untrusted import sanitize, visible
from prime_ci.model.usage import usd

RESULT_VERSION = 1


def dirty_note(paths: list[str], included: bool, count: int | None = None) -> str:
    """The uncommitted changes of REPO (its environments and build trees are never among them)."""
    total = len(paths) if count is None else count
    shown = ", ".join(paths[:5]) + (f" and {total - 5} more" if total > 5 else "")
    if included:
        return f"REPO had uncommitted changes ({total} path(s): {shown}): included (--include-dirty)."
    return (f"REPO has uncommitted changes ({total} path(s): {shown}) that this run does not see; "
            "commit them or pass --include-dirty.")


def code_cell(text: str, limit: int = 120) -> str:
    """Untrusted text as a Markdown code span that fits a table cell: one line, cleaned, clipped, its own
    backticks and pipes unable to end the span or the cell."""
    text = " ".join(sanitize(str(text)).split())
    text = text[:limit] + ("…" if len(text) > limit else "")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text.replace('|', chr(92) + '|')}{pad}{fence}"


def _failed(entry: dict[str, Any], label: str) -> str:
    if not entry.get("timed_out"):
        return label
    return "⏱ " + ended(entry.get("exit_code"), True, entry.get("timeout_s"))


def _exit(entry: dict[str, Any]) -> str:
    return "—" if entry.get("exit_code") is None else str(entry["exit_code"])


def _rounds_run(name: str, rounds: list[dict[str, Any]]) -> int:
    """In how many gate rounds the gate ran (a round of a fast rerun and then the full gates counts once)."""
    return max(len({r.get("round") for r in rounds if name in (r.get("gates") or [])}), 1)


def _commands_table(title: str, entries: list[dict[str, Any]]) -> list[str]:
    """Setup or build commands: one row each."""
    if not entries:
        return []
    lines = [f"### {title}", "", "| command | result | exit | time |", "|---|---|---|---|"]
    for s in entries:
        state = "✅ ok" if s["passed"] else _failed(s, "❌ failed")
        lines.append(f"| {code_cell(s['command'])} | {state} | {_exit(s)} | {s['duration_s']:.1f}s |")
    return [*lines, ""]


def summary_markdown(result: dict[str, Any]) -> str:
    """The run for a reviewer; text from the repository or the model has its hidden characters shown."""
    ok = result["success"]
    icon = "✅" if ok else "❌"
    lines = [
        f"## {icon} prime-ci: `{result['stop_reason']}` (exit {result['exit_code']})",
        "",
    ]
    if result.get("detail"):
        lines += [f"> {result['detail']}", ""]
    task = " ".join(str(result.get("task", "")).split())
    lines += [f"**Task:** {task[:300]}{'…' if len(task) > 300 else ''}", "",
              f"**Model:** `{result['model']}` · **Base:** `{str(result.get('base_commit'))[:12]}` · "
              f"**Sandbox:** {result.get('sandbox', 'off')}", ""]
    if result.get("dirty"):
        lines += [dirty_note(result["dirty"], bool(result.get("snapshot_of")), result.get("dirty_count")), ""]
    lines += _commands_table("Setup", result.get("setup") or [])
    lines += _commands_table("Build (last round)", result.get("build") or [])
    gates = result.get("gates") or []
    if gates:
        lines += ["### Gates", "", "| gate | command | result | exit | time | rounds |", "|---|---|---|---|---|---|"]
        for g in gates:
            state = "✅ pass" if g["passed"] else _failed(g, "❌ fail")
            if g.get("flaky"):
                state += " (flaky)"
            if g.get("attempts", 1) > 1:
                state += f" · {g['attempts']} attempts in its last round"
            lines.append(f"| `{g['name']}` | {code_cell(g.get('command', ''))} | {state} | {_exit(g)} | "
                         f"{g['duration_s']:.1f}s | {_rounds_run(g['name'], result.get('rounds') or [])} |")
        lines.append("")
    u, b = result["usage"], result["budgets"]
    cost = "unknown (price not in litellm's table)" if u["cost_usd"] is None else usd(u["cost_usd"])
    cost_limit = usd(b["max_cost_usd"]) if b.get("max_cost_usd") else ""
    cached = (f" ({u.get('cache_read_tokens', 0):,} read from the prompt cache, {u.get('cache_write_tokens', 0):,} "
              "written)" if u.get("cache_read_tokens") or u.get("cache_write_tokens") else "")
    lines += [
        "### Budget", "", "| | used | limit |", "|---|---|---|",
        f"| turns | {u['turns']} | {b['max_turns']} |",
        f"| tokens | {u['total_tokens']:,}{cached} | {b['max_tokens']:,} |",
        f"| wall clock | {format_duration(result['wall_s'])} | {format_duration(b['max_wall_s'])} |",
        f"| cost | {cost} | {cost_limit} |", "",
    ]
    files = result.get("changed_files") or []
    lines += [f"### Changed files ({len(files)})", ""]
    lines += [f"- {code_cell(f, 300)}" for f in files[:50]] or ["(none)"]
    if len(files) > 50:
        lines.append(f"- … and {len(files) - 50} more (see patch.diff)")
    if result.get("children"):
        lines += ["", "### Sub-agents", ""]
        lines += [f"- `{c['name']}`: {c['status']}" for c in result["children"]]
    if result.get("flags"):
        lines += ["", "### Flags", ""] + [f"- {f}" for f in result["flags"]]
    return visible("\n".join(lines) + "\n")
