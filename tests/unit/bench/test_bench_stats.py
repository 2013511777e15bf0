"""prime-ci bench's statistics: Wilson intervals, exact McNemar, the paired bootstrap, summaries, the A/B
comparison and the threshold checks, against values computed by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest

from prime_ci.bench.model import TaskResult
from prime_ci.bench.stats import (
    compare,
    mcnemar_exact,
    paired_bootstrap,
    paired_runs,
    summarize,
    thresholds,
    wilson,
)


def result(task_id: str, harness: str, solved: bool, *, repeat: int = 0, **fields: Any) -> TaskResult:
    values: dict[str, Any] = {
        "id": task_id, "harness": harness, "repeat": repeat, "seed": repeat, "solved": solved,
        "stop_reason": "completed" if solved else "gates_failed", "exit_code": 0 if solved else 1,
        "cost_usd": 0.01, "total_tokens": 1000, "turns": 3, "wall_s": 10.0,
        "time_to_green_s": 5.0 if solved else None, "run_dir": f"runs/{harness}/{task_id}",
        "gates_passed": solved,
    }
    values.update(fields)
    return TaskResult(**values)


def bench(verdicts: dict[str, list[bool]], *, repeat: int = 0) -> list[TaskResult]:
    """Results of harness label -> verdicts of tasks t0, t1, ... (same order under every label)."""
    return [result(f"t{i}", label, v, repeat=repeat) for label, vs in verdicts.items() for i, v in enumerate(vs)]


# --- wilson ---------------------------------------------------------------------------------------------------

def test_wilson_matches_the_score_interval_computed_by_hand() -> None:
    # p = 5/8, z = 1.959964: centre = (p + z²/16) / (1 + z²/8), half = z/(1 + z²/8) · sqrt(p(1-p)/8 + z²/256)
    iv = wilson(5, 8)
    assert iv.low == pytest.approx(0.305742, abs=1e-6)
    assert iv.high == pytest.approx(0.863156, abs=1e-6)
    assert (iv.level, iv.method) == (0.95, "wilson")
    # not the normal (Wald) interval 0.625 ± 0.335
    assert iv.low != pytest.approx(0.625 - 1.959964 * math.sqrt(0.625 * 0.375 / 8), abs=1e-3)


def test_wilson_other_levels_and_edges() -> None:
    assert (wilson(0, 0).low, wilson(0, 0).high) == (0.0, 1.0)
    none, all_ = wilson(0, 10), wilson(10, 10)
    assert none.low == 0.0 and none.high == pytest.approx(0.277533, abs=1e-6)
    assert all_.high == 1.0 and all_.low == pytest.approx(0.722467, abs=1e-6)
    narrow = wilson(5, 8, level=0.9)  # z = 1.644854: centre 0.593410, half 0.245418
    assert narrow.low == pytest.approx(0.347991, abs=1e-6)
    assert narrow.high == pytest.approx(0.838828, abs=1e-6)
    assert narrow.level == 0.9
    with pytest.raises(ValueError, match="successes"):
        wilson(9, 8)


# --- McNemar --------------------------------------------------------------------------------------------------

def test_mcnemar_exact_known_values() -> None:
    assert mcnemar_exact(0, 5) == 0.0625  # 2 · (1/2)^5
    assert mcnemar_exact(5, 0) == 0.0625
    assert mcnemar_exact(1, 1) == 1.0  # 2 · 3/4 capped at 1
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 10) == pytest.approx(2 * (1 + 13 + 78 + 286) / 2**13)  # 0.0922851...
    assert mcnemar_exact(2, 8) == mcnemar_exact(8, 2) == pytest.approx(2 * 56 / 1024)
    # exact integers: no overflow or underflow with many pairs
    assert 0 < mcnemar_exact(600, 900) < 1e-8


# --- bootstrap ------------------------------------------------------------------------------------------------

PAIRS = [(False, True)] * 3 + [(True, False)] + [(True, True)] * 3 + [(False, False)] * 3


def test_paired_bootstrap_is_deterministic_and_covers_the_difference() -> None:
    first = paired_bootstrap(PAIRS, resamples=2000, seed=7)
    assert first == paired_bootstrap(PAIRS, resamples=2000, seed=7)
    assert first == paired_bootstrap(list(reversed(PAIRS)), resamples=2000, seed=7)  # order does not matter
    assert first.method == "paired bootstrap (2000 resamples, seed 7)"
    assert first.low < 0.2 < first.high  # the observed difference, (3 - 1) / 10
    assert first.low >= -1 and first.high <= 1
    # the seed decides the resamples: over a few seeds, 50 resamples give different intervals
    assert len({(iv.low, iv.high) for iv in (paired_bootstrap(PAIRS, resamples=50, seed=s) for s in range(6))}) > 1


def test_paired_bootstrap_percentiles_by_hand() -> None:
    # diffs {1, 0}: a resample's mean is 0, 1/2 or 1 with probabilities 1/4, 1/2, 1/4, so the 2.5th and
    # 97.5th percentiles are 0 and 1, the 30th and 70th both 1/2
    iv = paired_bootstrap([(False, True), (True, True)], resamples=4000, seed=1)
    assert (iv.low, iv.high) == (0.0, 1.0)
    iv = paired_bootstrap([(False, True), (True, True)], resamples=4000, seed=1, level=0.4)
    assert (iv.low, iv.high) == (0.5, 0.5)


def test_paired_bootstrap_with_identical_pairs_has_zero_width() -> None:
    iv = paired_bootstrap([(True, True), (False, False), (True, True)])
    assert (iv.low, iv.high) == (0.0, 0.0)
    iv = paired_bootstrap([(False, True)] * 4)
    assert (iv.low, iv.high) == (1.0, 1.0)


# --- summarize ------------------------------------------------------------------------------------------------

def test_summarize_totals_and_stop_reasons() -> None:
    results = [
        result("b", "base", True, time_to_green_s=30.0, cost_usd=0.5, total_tokens=100, turns=2, wall_s=40.0),
        result("a", "base", True, time_to_green_s=10.0, cost_usd=0.25, total_tokens=50, turns=1, wall_s=20.0),
        result("c", "base", False, stop_reason="max_turns", cost_usd=0.125, total_tokens=10, turns=12, wall_s=5.5,
               time_to_green_s=3.0),  # green once, not solved: not in the median
        result("d", "base", True, time_to_green_s=None, stop_reason="completed"),
        result("a", "other", False),
    ]
    s = summarize("base", "harness/base", results)
    assert (s.harness, s.source, s.runs, s.solved) == ("base", "harness/base", 4, 3)
    assert s.solve_rate == 0.75
    assert s.interval == wilson(3, 4)
    assert s.cost_usd == pytest.approx(0.885)
    assert (s.total_tokens, s.turns, s.wall_s) == (1160, 18, 75.5)
    assert s.median_time_to_green_s == 20.0  # median of 10 and 30 (solved runs that have one)
    assert s.by_stop_reason == {"completed": ["a", "b", "d"], "max_turns": ["c"]}


def test_summarize_unknown_cost_and_repeat_keys() -> None:
    results = [result("a", "h", True, repeat=0), result("a", "h", False, repeat=1, cost_usd=None),
               result("b", "h", True, repeat=0)]
    s = summarize("h", "none", results)
    assert s.cost_usd is None
    assert s.by_stop_reason == {"completed": ["a.r0", "b.r0"], "gates_failed": ["a.r1"]}
    empty = summarize("missing", "none", results)
    assert (empty.runs, empty.solve_rate, empty.median_time_to_green_s, empty.cost_usd) == (0, 0.0, None, 0.0)
    assert (empty.interval.low, empty.interval.high) == (0.0, 1.0)


# --- compare --------------------------------------------------------------------------------------------------

def test_compare_identical_harnesses() -> None:
    verdicts = [True, False, True, True, False]
    c = compare("A", "B", bench({"A": verdicts, "B": verdicts}))
    assert (c.baseline, c.candidate, c.pairs) == ("A", "B", 5)
    assert c.difference == 0.0
    assert c.flips == []
    assert c.p_value == 1.0
    assert (c.interval.low, c.interval.high) == (0.0, 0.0)
    assert c.test == "exact McNemar (two-sided)"
    assert (c.cost_difference_usd, c.tokens_difference, c.wall_difference_s) == (0.0, 0, 0.0)


def test_compare_with_flips() -> None:
    base = [True, False, False, False, False, False, True, False]
    cand = [True, True, True, True, True, True, False, False]  # t1..t5 newly solved, t6 newly failed
    results = bench({"A": base, "B": cand})
    results += [result("t9", "A", True), result("t9", "A", True, repeat=1)]  # unpaired: ignored
    results.append(result("t0", "B", True, repeat=3))  # unpaired: ignored
    results[1] = results[1].model_copy(update={"cost_usd": 0.5, "total_tokens": 1500, "wall_s": 12.5})  # A t1
    c = compare("A", "B", results, resamples=3000, seed=3)
    assert c.pairs == 8
    assert c.difference == pytest.approx((6 - 2) / 8)
    assert [(f.id, f.repeat, f.baseline, f.candidate) for f in c.flips] == [
        ("t1", 0, False, True), ("t2", 0, False, True), ("t3", 0, False, True), ("t4", 0, False, True),
        ("t5", 0, False, True), ("t6", 0, True, False)]
    assert c.p_value == pytest.approx(2 * (1 + 6) / 2**6)  # b = 1, c = 5: 0.21875
    assert c.interval.method == "paired bootstrap (3000 resamples, seed 3)"
    assert c.interval.low < c.difference < c.interval.high
    assert c.cost_difference_usd == pytest.approx(-0.49)  # candidate minus baseline, pairs only
    assert c.tokens_difference == -500
    assert c.wall_difference_s == -2.5
    assert compare("A", "B", results, resamples=3000, seed=3) == c


def test_compare_pairs_repeats_and_unknown_cost() -> None:
    results = [result("x", "A", False, repeat=1), result("x", "B", True, repeat=1, cost_usd=None),
               result("x", "A", True, repeat=0), result("x", "B", True, repeat=0)]
    assert [(b.repeat, c.repeat) for b, c in paired_runs("A", "B", results)] == [(0, 0), (1, 1)]
    c = compare("A", "B", results)
    assert [(f.id, f.repeat) for f in c.flips] == [("x", 1)]
    assert c.cost_difference_usd is None
    assert c.p_value == 1.0  # one discordant pair: 2 · 1/2


# --- thresholds -----------------------------------------------------------------------------------------------

def test_thresholds() -> None:
    c = compare("A", "B", bench({"A": [True, True, True, False, True, True, True, False, True, True],
                                 "B": [True, True, True, False, True, True, True, False, False, True]}))
    assert c.difference == pytest.approx(-0.1)
    [ok, regression] = thresholds(0.7, c, min_solve_rate=0.7, max_regression=0.1)
    assert (ok.name, ok.limit, ok.value, ok.passed) == ("min_solve_rate", 0.7, 0.7, True)
    assert (regression.name, regression.limit, regression.passed) == ("max_regression", 0.1, True)
    assert regression.value == pytest.approx(0.1)
    [low] = thresholds(0.69, c, min_solve_rate=0.7)
    assert not low.passed
    [strict] = thresholds(0.7, c, max_regression=0.05)
    assert not strict.passed
    [none] = thresholds(0.7, c, max_regression=0.0)
    assert not none.passed
    assert thresholds(0.7, None) == []


def test_max_regression_needs_a_comparison() -> None:
    assert thresholds(0.5, None, min_solve_rate=0.4)[0].passed
    with pytest.raises(ValueError, match=r"--max-regression .*two or more --harness"):
        thresholds(0.5, None, max_regression=0.1)
    with pytest.raises(ValueError, match="--min-solve-rate must be between 0 and 1"):
        thresholds(0.5, None, min_solve_rate=50)
