"""summary.md's gate and setup tables: the command (cleaned, in a code span), rounds run, timeouts in words."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prime_ci.artifacts.report import code_cell, summary_markdown
from prime_ci.engine.setup import SetupOutcome, SetupSpec, failure_detail, run_all


def _result(**extra: Any) -> dict[str, Any]:
    usage = {"turns": 1, "total_tokens": 10, "cost_usd": None}
    budgets = {"max_turns": 5, "max_tokens": 100, "max_wall_s": 600.0, "max_cost_usd": None}
    return {"success": False, "stop_reason": "gates_failed", "exit_code": 1, "task": "t", "model": "m",
            "base_commit": "abc", "usage": usage, "budgets": budgets, "wall_s": 1.0, **extra}


def _gate(name: str, command: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": command, "passed": True, "exit_code": 0, "timed_out": False,
            "duration_s": 1.0, "attempts": 1, "flaky": False, "timeout_s": 600.0, **extra}


def test_gates_table_shows_command_rounds_and_timeouts() -> None:
    rounds = [{"round": 1, "kind": "full", "gates": ["tests", "lint"]},
              {"round": 2, "kind": "fast", "gates": ["tests"]},
              {"round": 2, "kind": "full", "gates": ["tests", "lint"]},
              {"round": 3, "kind": "full", "gates": ["tests"], "on_demand": True}]
    gates = [_gate("tests", "python -m pytest -q | tee `x` \x1b[31m\n--lf"),
             _gate("lint", "ruff check .", passed=False, exit_code=None, timed_out=True, timeout_s=600.0)]
    md = summary_markdown(_result(gates=gates, rounds=rounds))
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| `")}
    assert "| gate | command | result | exit | time | rounds |" in md and "attempts |" not in md
    assert rows["`tests`"].endswith("| 1s | 3 |"), "rounds 1, 2 (fast and full) and 3"
    assert r"``python -m pytest -q \| tee `x` --lf``" in rows["`tests`"]
    assert "⏱ timed out after 10m | — | 1s | 2 |" in rows["`lint`"] and "None" not in rows["`lint`"]


def test_code_cell_cannot_be_closed_or_split() -> None:
    assert code_cell("a``b") == "```a``b```"
    assert code_cell("`x`") == "`` `x` ``"
    assert code_cell("a|b <!-- shown -->\u200bc\x1b[31m") == r"`a\|b <!-- shown --><U+200B>c`"
    assert code_cell("x" * 200).endswith("x…`") and len(code_cell("x" * 200)) == 123


def test_setup_timeout_is_said_in_the_console_summary_and_detail(tmp_path: Path) -> None:
    said: list[str] = []

    async def runner(spec: SetupSpec) -> SetupOutcome:
        return SetupOutcome(name=spec.name, command=spec.command, passed=False, exit_code=None, timed_out=True,
                            duration_s=900.2, log="setup/deps.log", timeout_s=spec.timeout)

    outcomes = asyncio.run(run_all([SetupSpec(name="deps", command="npm ci", timeout=900)], runner, said.append))
    assert "setup deps: FAILED (timed out after 15m) in" in said[-1]
    assert failure_detail(outcomes[0]).startswith("setup 'deps' failed (timed out after 15m): npm ci")
    md = summary_markdown(_result(setup=[o.model_dump() for o in outcomes]))
    assert "| `npm ci` | ⏱ timed out after 15m | — | 15m |" in md
