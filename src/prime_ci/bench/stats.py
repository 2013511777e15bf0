"""The bench's statistics, standard library only: solve-rate intervals (Wilson), the paired A/B (bootstrap
interval of the difference, exact McNemar test, flips) and the threshold checks behind --min-solve-rate and
--max-regression. Everything here is deterministic: the same results give the same report in every shard."""

from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction
from statistics import NormalDist

from prime_ci.bench.model import Comparison, Flip, Interval, Summary, TaskResult, ThresholdCheck

MCNEMAR = "exact McNemar (two-sided)"
# Float noise (0.7 - 0.6 = 0.09999999999999998) must not decide a threshold.
_TOLERANCE = 1e-9


def _z(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be between 0 and 1 (exclusive), got {level}")
    return NormalDist().inv_cdf(1 - (1 - level) / 2)


def wilson(successes: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval of a proportion ``successes / n``; (0, 1) when there is nothing to go on."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson: need 0 <= successes <= n, got {successes}/{n}")
    z = _z(level)
    if n == 0:
        return Interval(low=0.0, high=1.0, level=level, method="wilson")
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At 0 or n successes the bound equals p in exact arithmetic: do not let rounding move it off.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(low=low, high=high, level=level, method="wilson")


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs (``b`` baseline-only and ``c``
    candidate-only successes) against p = 0.5, ``min(1, 2 * P[X <= min(b, c)])``; 1.0 without discordant
    pairs. Computed with exact integers, so it holds for any number of pairs."""
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact: counts must be >= 0, got {b}, {c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def bootstrap_method(resamples: int, seed: int) -> str:
    return f"paired bootstrap ({resamples} resamples, seed {seed})"


def paired_bootstrap(pairs: list[tuple[bool, bool]], *, resamples: int = 10000, seed: int = 0,
                     level: float = 0.95) -> Interval:
    """Percentile bootstrap interval of the mean paired difference (candidate - baseline) of ``pairs`` given as
    ``(baseline solved, candidate solved)``. Deterministic: ``random.Random(seed)``, and the pairs' order does
    not matter. No pairs: (-1, 1), nothing is known."""
    if resamples < 1:
        raise ValueError(f"paired_bootstrap: resamples must be >= 1, got {resamples}")
    alpha = 1 - level
    _z(level)  # validates the level
    method = bootstrap_method(resamples, seed)
    n = len(pairs)
    if n == 0:
        return Interval(low=-1.0, high=1.0, level=level, method=method)
    diffs = sorted(int(cand) - int(base) for base, cand in pairs)
    if diffs[0] == diffs[-1]:  # every resample has the same mean
        return Interval(low=float(diffs[0]), high=float(diffs[0]), level=level, method=method)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    lo = min(resamples - 1, math.floor(resamples * alpha / 2 + _TOLERANCE))
    hi = resamples - 1 - lo
    return Interval(low=means[lo], high=means[hi], level=level, method=method)


def run_key(task_id: str, repeat: int, *, repeats: bool) -> str:
    """A run's name in reports: ``<id>``, or ``<id>.r<k>`` when the bench has repeats."""
    return f"{task_id}.r{repeat}" if repeats else task_id


def has_repeats(results: list[TaskResult]) -> bool:
    return any(r.repeat > 0 for r in results)


def summarize(harness: str, source: str, results: list[TaskResult], *, level: float = 0.95) -> Summary:
    """Totals over the runs of ``harness`` in ``results`` (other harnesses' runs are ignored; they only decide
    whether run keys carry a repeat suffix)."""
    repeats = has_repeats(results)
    mine = sorted((r for r in results if r.harness == harness), key=lambda r: (r.id, r.repeat))
    solved = sum(1 for r in mine if r.solved)
    costs = [r.cost_usd for r in mine]
    green = [r.time_to_green_s for r in mine if r.solved and r.time_to_green_s is not None]
    by_reason: dict[str, list[str]] = {}
    for r in mine:  # already in (id, repeat) order
        by_reason.setdefault(r.stop_reason, []).append(run_key(r.id, r.repeat, repeats=repeats))
    return Summary(
        harness=harness,
        source=source,
        runs=len(mine),
        solved=solved,
        solve_rate=solved / len(mine) if mine else 0.0,
        interval=wilson(solved, len(mine), level),
        cost_usd=None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 6),
        total_tokens=sum(r.total_tokens for r in mine),
        turns=sum(r.turns for r in mine),
        wall_s=round(sum(r.wall_s for r in mine), 3),
        median_time_to_green_s=statistics.median(green) if green else None,
        by_stop_reason=dict(sorted(by_reason.items())),
    )


def paired_runs(baseline: str, candidate: str,
                results: list[TaskResult]) -> list[tuple[TaskResult, TaskResult]]:
    """The (baseline run, candidate run) pairs with the same task id and repeat, sorted by (id, repeat); runs
    without a partner are left out."""
    base = {(r.id, r.repeat): r for r in results if r.harness == baseline}
    cand = {(r.id, r.repeat): r for r in results if r.harness == candidate}
    return [(base[k], cand[k]) for k in sorted(base.keys() & cand.keys())]


def compare(baseline: str, candidate: str, results: list[TaskResult], *, resamples: int = 10000, seed: int = 0,
            level: float = 0.95) -> Comparison:
    """The paired A/B of ``candidate`` against ``baseline`` over the runs both have (same id and repeat)."""
    pairs = paired_runs(baseline, candidate, results)
    verdicts = [(b.solved, c.solved) for b, c in pairs]
    only_baseline = sum(1 for b, c in verdicts if b and not c)
    only_candidate = sum(1 for b, c in verdicts if c and not b)
    n = len(pairs)
    costs = [(b.cost_usd, c.cost_usd) for b, c in pairs]
    cost_difference: float | None = None
    if all(b is not None and c is not None for b, c in costs):
        cost_difference = round(sum(c or 0.0 for _, c in costs) - sum(b or 0.0 for b, _ in costs), 6)
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        pairs=n,
        difference=(only_candidate - only_baseline) / n if n else 0.0,
        interval=paired_bootstrap(verdicts, resamples=resamples, seed=seed, level=level),
        p_value=mcnemar_exact(only_baseline, only_candidate),
        test=MCNEMAR,
        flips=[Flip(id=b.id, repeat=b.repeat, baseline=b.solved, candidate=c.solved)
               for b, c in pairs if b.solved != c.solved],
        cost_difference_usd=cost_difference,
        tokens_difference=sum(c.total_tokens - b.total_tokens for b, c in pairs),
        wall_difference_s=round(sum(c.wall_s for _, c in pairs) - sum(b.wall_s for b, _ in pairs), 3),
    )


def _fraction(name: str, value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")


def thresholds(solve_rate: float, comparison: Comparison | None, *, min_solve_rate: float | None = None,
               max_regression: float | None = None) -> list[ThresholdCheck]:
    """The checks a gated bench run fails on: ``min_solve_rate`` against the candidate's solve rate,
    ``max_regression`` against baseline rate - candidate rate over the paired runs (needs a comparison, i.e.
    two or more harnesses: ValueError otherwise, as for a limit outside 0..1)."""
    checks: list[ThresholdCheck] = []
    if min_solve_rate is not None:
        _fraction("min_solve_rate", min_solve_rate)
        checks.append(ThresholdCheck(name="min_solve_rate", limit=min_solve_rate, value=solve_rate,
                                     passed=solve_rate >= min_solve_rate - _TOLERANCE))
    if max_regression is not None:
        _fraction("max_regression", max_regression)
        if comparison is None:
            raise ValueError("--max-regression compares a candidate with a baseline: give two or more --harness "
                             "(the first is the baseline, the last the candidate)")
        regression = -comparison.difference + 0.0  # + 0.0: no "-0.0" in the report
        checks.append(ThresholdCheck(name="max_regression", limit=max_regression, value=regression,
                                     passed=regression <= max_regression + _TOLERANCE))
    return checks
