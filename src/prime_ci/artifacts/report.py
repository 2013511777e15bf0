"""result.json and summary.md contents (files are written by ``artifacts.durable``; stop reasons and exit codes
are ``engine.stops``)."""

from __future__ import annotations

from typing import Any

from prime_ci.durations import format_duration
from prime_ci.model.usage import usd

RESULT_VERSION = 1


def dirty_note(paths: list[str], included: bool) -> str:
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    if included:
        return f"REPO had uncommitted changes ({len(paths)} path(s): {shown}): included (--include-dirty)."
    return (f"REPO has uncommitted changes ({len(paths)} path(s): {shown}) that this run does not see; "
            "commit them or pass --include-dirty.")


def _commands_table(title: str, entries: list[dict[str, Any]]) -> list[str]:
    """Setup or build commands: one row each."""
    if not entries:
        return []
    lines = [f"### {title}", "", "| command | result | exit | time |", "|---|---|---|---|"]
    for s in entries:
        command = " ".join(str(s["command"]).split())[:120].replace("|", "\\|")
        state = "✅ ok" if s["passed"] else ("⏱ timeout" if s.get("timed_out") else "❌ failed")
        lines.append(f"| `{command}` | {state} | {s['exit_code']} | {s['duration_s']:.1f}s |")
    return [*lines, ""]


def summary_markdown(result: dict[str, Any]) -> str:
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
        lines += [dirty_note(result["dirty"], bool(result.get("snapshot_of"))), ""]
    lines += _commands_table("Setup", result.get("setup") or [])
    lines += _commands_table("Build (last round)", result.get("build") or [])
    gates = result.get("gates") or []
    if gates:
        lines += ["### Gates", "", "| gate | result | exit | time | attempts |", "|---|---|---|---|---|"]
        for g in gates:
            state = "✅ pass" if g["passed"] else ("⏱ timeout" if g.get("timed_out") else "❌ fail")
            if g.get("flaky"):
                state += " (flaky)"
            lines.append(f"| `{g['name']}` | {state} | {g['exit_code']} | {g['duration_s']:.1f}s | {g['attempts']} |")
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
    lines += [f"- `{f}`" for f in files[:50]] or ["(none)"]
    if len(files) > 50:
        lines.append(f"- … and {len(files) - 50} more (see patch.diff)")
    if result.get("children"):
        lines += ["", "### Sub-agents", ""]
        lines += [f"- `{c['name']}`: {c['status']}" for c in result["children"]]
    if result.get("flags"):
        lines += ["", "### Flags", ""] + [f"- {f}" for f in result["flags"]]
    return "\n".join(lines) + "\n"
