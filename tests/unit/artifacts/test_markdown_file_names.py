"""File names are the model's text: in summary.md and ``prime-ci report`` they stay inside their code span, so a
name cannot put an image (a tracking pixel), a link or HTML into a job's step summary."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prime_ci.artifacts.multireport import aggregate
from prime_ci.artifacts.report import summary_markdown
from prime_ci.artifacts.schemas import ResultModel

# a path the model can create: directories make the slashes
HOSTILE = "x` ![pixel](https:/127.0.0.1:9/p.png) [click](https:/127.0.0.1:9/) <b>bold</b> `y.py"
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def outside_code_spans(markdown: str) -> str:
    """What CommonMark renders as markup: the text with every code span taken out."""
    return _SPAN.sub("", markdown)


def result(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "version": 1, "run_id": "r1", "stop_reason": "completed", "exit_code": 0, "success": True, "task": "t",
        "model": "m", "base_commit": "abc", "wall_s": 1.0, "gates": [], "children": [], "flags": [],
        "usage": {"turns": 1, "model_calls": 1, "prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10,
                  "cost_usd": None},
        "budgets": {"max_turns": 5, "max_tokens": 100, "max_wall_s": 600.0, "max_cost_usd": None}, **extra}
    ResultModel.model_validate(data)
    return data


def test_a_hostile_file_name_stays_code_in_summary_md() -> None:
    md = summary_markdown(result(changed_files=["calc.py", HOSTILE]))
    shown = outside_code_spans(md)
    assert "calc.py" not in shown and "y.py" not in shown, "each name is one code span"
    assert "](" not in shown and "<b>" not in shown


def test_a_hostile_file_name_stays_code_in_the_report(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps(result(changed_files=["calc.py", HOSTILE])))
    md, data = aggregate([tmp_path])
    assert data["totals"]["changed_files"] == ["calc.py", HOSTILE]
    shown = outside_code_spans(md)
    assert "y.py" not in shown and "](" not in shown and "<b>" not in shown
