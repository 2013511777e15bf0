"""One duration format wherever prime-ci prints a duration (DESIGN §14): as ``--max-wall`` takes it, in warnings,
budget notes, the closing notice and summary.md alike (never ``7200.0``)."""

from __future__ import annotations

import pytest

from prime_ci.artifacts.report import summary_markdown
from prime_ci.durations import format_duration, parse_duration
from prime_ci.engine.actions_log import verdict
from prime_ci.engine.config import build_config
from prime_ci.gates.junit import ended
from prime_ci.loop.budget import Snapshot

SHOWN = {0: "0s", 0.04: "0s", 1.06: "1.1s", 45: "45s", 59.96: "1m", 75.3: "1m15s", 5400: "1h30m", 7200: "2h"}


def test_every_duration_is_written_as_max_wall_takes_it() -> None:
    assert {value: format_duration(value) for value in SHOWN} == SHOWN
    for value, text in SHOWN.items():
        if text != "0s":
            assert parse_duration(text) == pytest.approx(value, abs=0.5)

    warned: list[str] = []
    build_config({"task": "t", "model": "replay:x.jsonl"}, {"max_wall": "2h", "cell_timeout": 3600}, warned.append)
    assert [w.split(" (a repository")[0] for w in warned] == [
        "repository settings: max-wall = 2h ignored: it would raise the operator's 30m",
        "repository settings: cell-timeout = 1h ignored: it would raise the operator's 5m"]

    note = Snapshot(turns=0, max_turns=9, total_tokens=0, max_tokens=9, elapsed_s=3600.0, max_wall_s=7200.0,
                    cost_usd=0.0, max_cost_usd=None).notes(set())
    assert note == ["[budget] 50% of the wall budget used (1h/2h wall clock)."]

    result = {"success": True, "stop_reason": "completed", "exit_code": 0, "time_to_green_s": 75.3, "wall_s": 7200.0,
              "rounds": [{"round": 1, "kind": "full", "passed": True, "gates": ["g"], "duration_s": 75.3,
                          "at_s": 75.3}],
              "gates": [{"name": "g", "command": "true", "passed": True, "exit_code": 0, "duration_s": 75.3}],
              "usage": {"turns": 1, "total_tokens": 10, "cost_usd": None}, "task": "t", "model": "m",
              "base_commit": "a" * 40,
              "budgets": {"max_turns": 9, "max_tokens": 99, "max_wall_s": 9000.0, "max_cost_usd": None}}
    assert verdict(result).endswith("green after 1m15s · 1 turn(s), 10 tokens, 2h")  # the closing ::notice
    md = summary_markdown(result)
    assert "| 1 | full | ✅ green |  |  | 1m15s | 1m15s |" in md and "| 0 | 1m15s | 1 |" in md
    assert "| wall clock | 2h | 2h30m |" in md
    assert ended(None, True, 1.5) == "timed out after 1.5s"
