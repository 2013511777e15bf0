"""result.json and summary.md contents (files are written by ``isolation.durable``; stop reasons and exit codes
are ``prime_ci.stops``)."""

from __future__ import annotations

from typing import Any

from prime_ci.artifacts.summary_parts import (
    SummaryInputs,
    change_section,
    children_section,
    code_cell,
    code_span,
    links_section,
    message_section,
    plain,
    rounds_section,
    task_section,
)
from prime_ci.durations import format_duration
from prime_ci.gates.junit import ended
from prime_ci.isolation.untrusted import visible
from prime_ci.money import usd

RESULT_VERSION = 1


def dirty_note(paths: list[str], included: bool, count: int | None = None) -> str:
    """The uncommitted changes of REPO (its environments and build trees are never among them)."""
    total = len(paths) if count is None else count
    shown = ", ".join(paths[:5]) + (f" and {total - 5} more" if total > 5 else "")
    if included:
        return f"REPO had uncommitted changes ({total} path(s): {shown}): included (--include-dirty)."
    return (f"REPO has uncommitted changes ({total} path(s): {shown}) that this run does not see; "
            "commit them or pass --include-dirty.")


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
        lines.append(f"| {code_cell(s['command'])} | {state} | {_exit(s)} | {format_duration(s['duration_s'])} |")
    return [*lines, ""]


def summary_markdown(result: dict[str, Any], inputs: SummaryInputs | None = None) -> str:
    """The run for a reviewer, in DESIGN §13's order (verdict, task, rounds, time to green, the change, the model's
    final message, sub-agents, setup and build, budget, links); text from the repository or the model is never
    markup and has its hidden characters shown."""
    inputs = inputs or SummaryInputs()
    icon = "✅" if result["success"] else "❌"
    lines = [f"## {icon} prime-ci: `{result['stop_reason']}` (exit {result['exit_code']})", ""]
    if result.get("detail"):
        lines += [f"> {plain(result['detail'])}", ""]
    if result.get("flags"):
        lines += ["**Flags:**", ""] + [f"- {code_span(f, 300)}" for f in result["flags"]] + [""]
    lines += task_section(str(result.get("task", "")))
    lines += [f"**Model:** {code_span(result['model'])} · **Base:** `{str(result.get('base_commit'))[:12]}` · "
              f"**Sandbox:** {code_span(result.get('sandbox', 'off'), 600)}", ""]
    if result.get("dirty"):
        note = dirty_note(result["dirty"], bool(result.get("snapshot_of")), result.get("dirty_count"))
        lines += [f"**Uncommitted changes:** {code_span(note, 600)}", ""]
    lines += rounds_section(result, inputs.failing)
    lines += _gates_table(result)
    lines += change_section(inputs.patch, result.get("changed_files") or [])
    lines += message_section(inputs.final_message)
    lines += children_section(result.get("children") or [])
    lines += _commands_table("Setup", result.get("setup") or [])
    lines += _commands_table("Build (last round)", result.get("build") or [])
    lines += _budget(result)
    lines += links_section(inputs.links)
    return visible("\n".join(lines).rstrip("\n") + "\n")


def _gates_table(result: dict[str, Any]) -> list[str]:
    """Each gate's last run, with its command and the rounds it ran in."""
    gates = result.get("gates") or []
    if not gates:
        return []
    lines = ["### Gates (last run)", "", "| gate | command | result | exit | time | rounds |",
             "|---|---|---|---|---|---|"]
    for g in gates:
        state = "✅ pass" if g["passed"] else _failed(g, "❌ fail")
        if g.get("flaky"):
            state += " (flaky)"
        if g.get("attempts", 1) > 1:
            state += f" · {g['attempts']} attempts in its last round"
        lines.append(f"| {code_cell(g['name'])} | {code_cell(g.get('command', ''))} | {state} | {_exit(g)} | "
                     f"{format_duration(g['duration_s'])} | {_rounds_run(g['name'], result.get('rounds') or [])} |")
    return [*lines, ""]


def _budget(result: dict[str, Any]) -> list[str]:
    u, b = result["usage"], result["budgets"]
    cost = "unknown (price not in litellm's table)" if u["cost_usd"] is None else usd(u["cost_usd"])
    cost_limit = usd(b["max_cost_usd"]) if b.get("max_cost_usd") else ""
    cached = (f" ({u.get('cache_read_tokens', 0):,} read from the prompt cache, {u.get('cache_write_tokens', 0):,} "
              "written)" if u.get("cache_read_tokens") or u.get("cache_write_tokens") else "")
    return [
        "### Budget", "", "| | used | limit |", "|---|---|---|",
        f"| turns | {u['turns']} | {b['max_turns']} |",
        f"| tokens | {u['total_tokens']:,}{cached} | {b['max_tokens']:,} |",
        f"| wall clock | {format_duration(result['wall_s'])} | {format_duration(b['max_wall_s'])} |",
        f"| cost | {cost} | {cost_limit} |", "",
    ]
