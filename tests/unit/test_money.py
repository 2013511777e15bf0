"""One money format wherever prime-ci prints a dollar figure (DESIGN §14): ``$0.01`` and up to two places, below a
cent four significant digits; the console, summary.md, the notice, warnings, reports and the publish step agree."""

from __future__ import annotations

from typing import Any

from conftest import repo_script
from prime_ci.artifacts.multireport import _markdown
from prime_ci.artifacts.report import summary_markdown
from prime_ci.engine.actions_log import verdict
from prime_ci.engine.config import build_config
from prime_ci.money import usd

SHOWN = {0.5: "$0.50", 2: "$2.00", 0.002976: "$0.002976", 0.0097: "$0.0097", 0.0123: "$0.01", 0.0151: "$0.02",
         0.0099996: "$0.01", 0.00001234567: "$0.00001235", 0: "$0.00", 1234.5: "$1,234.50", -0.5: "-$0.50"}


def _publish_usd() -> Any:
    return repo_script("publish/helper.py").usd


def test_every_dollar_figure_has_one_format() -> None:
    assert {value: usd(value) for value in SHOWN} == SHOWN
    publish = _publish_usd()  # stdlib only, no prime-ci installed: its twin
    assert {value: publish(value) for value in SHOWN} == SHOWN

    usage = {"turns": 2, "total_tokens": 1500, "cost_usd": 0.0097}
    result = {"success": False, "stop_reason": "max_cost", "exit_code": 3, "rounds": [], "usage": usage,
              "budgets": {"max_turns": 5, "max_tokens": 9000, "max_wall_s": 600.0, "max_cost_usd": 2.0},
              "wall_s": 61.0, "task": "t", "model": "openai/m", "base_commit": "a" * 40}
    assert ", $0.0097, " in verdict(result)  # the closing ::notice
    assert "| cost | $0.0097 | $2.00 |" in summary_markdown(result)

    warned: list[str] = []
    build_config({"task": "t", "model": "openai/no-such-model"}, {"max_cost": 0.5}, warned.append)
    assert [w.split(" ignored")[0] for w in warned] == ["repository settings: max-cost = $0.50"]

    totals = {"runs": 1, "succeeded": 1, "failed": 0, "turns": 1, "total_tokens": 10, "cost_usd": 0.5,
              "cost_unknown_runs": 0, "wall_s": 5.0, "gates_passed": 1, "gates_failed": 0, "stop_reasons": {},
              "changed_files": []}
    assert "| cost | $0.50 |" in _markdown([], totals)
