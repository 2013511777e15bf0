"""bench.md: what a reviewer reads of a bench (and a workflow posts on a pull request)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from prime_ci.bench.markdown import render
from prime_ci.bench.model import BenchReport, HiddenCheck, SuiteInfo, TaskResult
from prime_ci.bench.stats import compare, summarize, thresholds, wilson
from rendered import assert_inert

BASE = [True, True, False, True, False, True, True, False]  # 5/8
CAND = [True, True, True, True, False, True, False, True]  # 6/8: t2 and t7 newly solved, t6 newly failed


def result(task_id: str, harness: str, solved: bool, **fields: Any) -> TaskResult:
    values: dict[str, Any] = {
        "id": task_id, "harness": harness, "repeat": 0, "seed": 0, "solved": solved,
        "stop_reason": "completed" if solved else "gates_failed", "exit_code": 0 if solved else 1,
        "cost_usd": 0.0125, "total_tokens": 1200, "turns": 4, "wall_s": 30.0,
        "time_to_green_s": 20.0 if solved else None, "run_dir": f"runs/{harness}/{task_id}",
        "gates_passed": solved,
    }
    values.update(fields)
    return TaskResult(**values)


def report(results: list[TaskResult], labels: list[str], *, recorded: bool = False,
           min_solve_rate: float | None = None, max_regression: float | None = None) -> BenchReport:
    summaries = [summarize(label, f"harness/{label}", results) for label in labels]
    comparison = compare(labels[0], labels[-1], results, resamples=2000) if len(labels) > 1 else None
    candidate = summaries[-1]
    return BenchReport(
        suite=SuiteInfo(name="demo", path="suite.toml", sha256="0" * 64, tasks=8),
        model=None if recorded else "openai/gpt-x", recorded=recorded, repeat=1, shard=None,
        solve_rate=candidate.solve_rate, solve_rate_interval=candidate.interval, harnesses=summaries,
        comparison=comparison,
        thresholds=thresholds(candidate.solve_rate, comparison, min_solve_rate=min_solve_rate,
                              max_regression=max_regression),
        tasks=results, wall_s=125.0,
    )


def ab_results() -> list[TaskResult]:
    results = [result(f"t{i}", "base", v) for i, v in enumerate(BASE)]
    results += [result(f"t{i}", "refined", v) for i, v in enumerate(CAND)]
    results[5] = result("t5", "base", True, stop_reason="completed", cost_usd=None)
    results[4] = result("t4", "base", False, stop_reason="max_turns", turns=12)
    return results


def test_single_harness_report() -> None:
    results = [result(f"t{i}", "base", v) for i, v in enumerate(BASE)]
    results[2] = result("t2", "base", False, stop_reason="completed", gates_passed=True,
                        hidden=HiddenCheck(passed=False, command="pytest", exit_code=1, failing=["test_x"],
                                           log="runs/base/t2/hidden/check.log", duration_s=1.0))
    md = render(report(results, ["base"]))
    assert md.startswith("## prime-ci bench: `demo`\n")
    assert "**Model:** `openai/gpt-x`" in md
    assert "- **Solve rate:** 5/8 = 62.5 % (95 % CI 30.6–86.3 %, Wilson)" in md
    assert "**Cost:** $0.10 · **Tokens:** 9,600 · **Turns:** 32 · **Wall:** 4m (sum) · " \
           "**Median time-to-green:** 20s" in md
    assert "  - `gates_failed` × 2: `t4`, `t7`" in md
    assert "  - `hidden tests failed` × 1: `t2`" in md
    assert "A/B" not in md and "Thresholds" not in md
    assert "| `t2` | `base` | ❌ | `completed` ([hidden tests failed](runs/base/t2/hidden/check.log): `test_x`) | " \
           "$0.01 | 1,200 | 4 | 30s | — | [summary](runs/base/t2/summary.md) |" in md
    assert "| `t0` | `base` | ✅ | `completed` | $0.01 | 1,200 | 4 | 30s | 20s | " \
           "[summary](runs/base/t0/summary.md) |" in md
    assert "repeat" not in md


def test_ab_report_with_flips_and_thresholds() -> None:
    md = render(report(ab_results(), ["base", "refined"], min_solve_rate=0.8, max_regression=0.0))
    assert md.startswith("## ❌ prime-ci bench: `demo`\n")
    assert "### A/B: `base` → `refined` (8 paired runs)" in md
    assert "| solve rate | 5/8 = 62.5 % | 6/8 = 75.0 % | +12.5 pp |" in md
    assert "| cost | unknown | $0.10 | unknown |" in md
    assert "| tokens | 9,600 | 9,600 | 0 |" in md
    # 2 newly solved, 1 newly failed: McNemar p = 2 · P[X <= 1 | n = 3] = 1
    assert "**Paired difference:** +12.5 percentage points, 95 % CI -" in md
    assert " by paired bootstrap (2000 resamples, seed 0); exact McNemar (two-sided): p = 1." in md
    assert "The interval contains 0: at this sample size the bench cannot tell the two harnesses apart." in md
    assert "**Flips:** 3 of 8 paired runs (2 newly solved, 1 newly failed)" in md
    flips = md[md.index("| task | baseline → candidate |"):].split("\n\n")[0].splitlines()[2:]
    assert flips == ["| `t2` | ✗ → ✓ (newly solved) |", "| `t6` | ✓ → ✗ (newly failed) |",
                     "| `t7` | ✗ → ✓ (newly solved) |"]
    assert "No task flips" not in md
    assert "  - `max_turns` × 1: `t4`" in md
    assert "| minimum solve rate | ≥ 80.0 % | 75.0 % | ❌ fail |" in md
    assert "| maximum regression | ≤ 0.0 pp | -12.5 pp | ✅ pass |" in md
    assert "**Threshold failed:** minimum solve rate: 75.0 % (limit ≥ 80.0 %)" in md


def test_identical_harnesses_say_no_task_flips() -> None:
    results = [result(f"t{i}", label, v) for label in ("a", "b") for i, v in enumerate(BASE)]
    md = render(report(results, ["a", "b"]))
    assert "| solve rate | 5/8 = 62.5 % | 5/8 = 62.5 % | 0.0 pp |" in md
    assert ("**Paired difference:** 0.0 percentage points, 95 % CI 0.0 to 0.0 by paired bootstrap (2000 resamples, "
            "seed 0); exact McNemar (two-sided): p = 1.") in md
    assert "No task flips: every paired run has the same verdict under both harnesses." in md
    assert "| task | baseline → candidate |" not in md


def test_recorded_sessions_are_called_what_they_are() -> None:
    md = render(report(ab_results(), ["base", "refined"], recorded=True))
    assert ("**Model:** recorded sessions (replay) — these numbers show the machinery, not a model's ability; "
            "run with --model for real numbers") in md
    assert "openai/gpt-x" not in render(report(ab_results(), ["base", "refined"], recorded=True))
    live = render(report(ab_results(), ["base", "refined"]))
    assert "recorded sessions" not in live


def test_repeats_get_a_column_and_run_keys() -> None:
    results = [result("t0", "h", True, repeat=0), result("t0", "h", False, repeat=1)]
    data = report(results, ["h"]).model_copy(update={"repeat": 2})
    md = render(data)
    assert "| task | harness | repeat | solved |" in md
    assert "| `t0` | `h` | 1 | ❌ |" in md
    assert "  - `gates_failed` × 1: `t0.r1`" in md


def test_text_from_suite_files_cannot_break_the_markdown() -> None:
    evil = "x|y\n# heading `z`"
    results = [result("t0", "base", False, stop_reason=evil, run_dir="runs/base/a b)|c")]
    data = report(results, ["base"])
    data = data.model_copy(update={"suite": data.suite.model_copy(update={"name": "s|u\nite"})})
    md = render(data)
    assert md.startswith("## prime-ci bench: `s\\|u ite`\n")
    assert "\n# heading" not in md
    row = next(line for line in md.splitlines() if line.startswith("| `t0` |"))
    assert "`` x\\|y # heading `z` ``" in row
    assert "[summary](runs/base/a%20b%29%7Cc/summary.md)" in row
    # the row has exactly as many cells as the header: every | in it is a separator or escaped
    header = next(line for line in md.splitlines() if line.startswith("| task |"))
    assert row.replace("\\|", "").count("|") == header.count("|")
    assert "  - `` x\\|y # heading `z` `` × 1: `t0`" in md


def test_wilson_line_uses_the_reports_interval() -> None:
    data = report([result(f"t{i}", "base", v) for i, v in enumerate(BASE)], ["base"])
    summary = data.harnesses[0].model_copy(update={"interval": wilson(5, 8, level=0.9)})
    md = render(data.model_copy(update={"harnesses": [summary]}))
    assert "5/8 = 62.5 % (90 % CI 34.8–83.9 %, Wilson)" in md


def test_bench_md_renders_nothing_from_suites_or_runs_as_markup() -> None:
    """Rendered with cmark-gfm as GitHub renders it (issue 37): the only links are the runs' own summaries."""
    evil = "x www.evil.example <img src=x> @octocat #12 [a](https://evil.example/) ``b`` | c\n# heading"
    results = [result(f"t{i}{evil}", label, i % 2 == 0, stop_reason="model_error" if i % 2 else "completed",
                      detail=evil, run_dir=f"runs/{label}/t{i}")
               for label in ("base", evil) for i in range(4)]
    data = report(results, ["base", evil], min_solve_rate=0.9)
    data = data.model_copy(update={"suite": data.suite.model_copy(update={"name": evil}), "model": evil})
    summaries = [f"runs/{label}/t{i}/summary.md" for label in ("base", evil) for i in range(4)]
    page = assert_inert(render(data), headings=["❌ prime-ci bench", "Harness", "A/B", "Thresholds"], folds=1,
                        links=[quote(link) for link in summaries])
    assert page.links, "the summaries are linked"
