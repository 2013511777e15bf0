"""bench.md: the report a reviewer reads (and a workflow posts as a pull-request comment), rendered from the
bench.json model. GitHub-flavoured markdown. Task ids, harness labels and suite names come from suite files
and the command line, details from the runs: they go through ``artifacts.markup`` (code spans, or escaped text
in a table cell), never markup."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote

from prime_ci.artifacts import markup
from prime_ci.bench.model import BenchReport, Comparison, Interval, Summary, TaskResult, ThresholdCheck
from prime_ci.bench.stats import run_key
from prime_ci.durations import format_duration
from prime_ci.isolation.untrusted import visible
from prime_ci.money import usd, usd_or_unknown

RECORDED_NOTE = ("recorded sessions (replay) — these numbers show the machinery, not a model's ability; "
                 "run with --model for real numbers")
MAX_KEYS_SHOWN = 20
_METHODS = {"wilson": "Wilson"}
_COMPLETED = "completed"


def _cell(text: str) -> str:
    """Text as ordinary text in one table cell (``markup.text_cell``)."""
    return markup.text_cell(text)


def _code(text: str) -> str:
    """``text`` as an inline code span (no markdown, links or @mentions inside), safe in a table cell."""
    return markup.code_cell(text)


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _sign(value: float, shown: str = "") -> str:
    """The sign of a difference as it will be shown: none when it shows as zero ("-0s" is no difference)."""
    if shown and not shown.strip("0.,$ smh%"):
        return ""
    return "+" if value > 0 else "-" if value < 0 else ""


def _signed(value: float, fmt: str) -> str:
    return _sign(value) + fmt.format(abs(value))


def _signed_usd(value: float | None) -> str:
    return "unknown" if value is None else _sign(value) + usd(abs(value))


def _signed_duration(value: float) -> str:
    shown = format_duration(abs(value))
    return _sign(value, shown) + shown


def _ttg(value: float | None) -> str:
    return "—" if value is None else format_duration(value)


def _interval(interval: Interval) -> str:
    method = _METHODS.get(interval.method, interval.method)
    return (f"{interval.level * 100:g} % CI {interval.low * 100:.1f}–{interval.high * 100:.1f} %, "
            f"{method}")


def solve_rate_line(summary: Summary) -> str:
    """``5/8 = 62.5 % (95 % CI 30.6–86.3 %, Wilson)``."""
    return f"{summary.solved}/{summary.runs} = {_pct(summary.solve_rate)} ({_interval(summary.interval)})"


def _p(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.3g}"


def _keys(keys: list[str]) -> str:
    shown = ", ".join(_code(k) for k in keys[:MAX_KEYS_SHOWN])
    return shown + (f" and {len(keys) - MAX_KEYS_SHOWN} more" if len(keys) > MAX_KEYS_SHOWN else "")


def _failure(task: TaskResult) -> str:
    """Why an unsolved run failed: its stop reason, or the hidden tests when the run itself completed."""
    if task.stop_reason == _COMPLETED and task.hidden is not None and not task.hidden.passed:
        return "hidden tests could not run" if task.hidden.error else "hidden tests failed"
    if task.stop_reason == _COMPLETED and task.gates_passed is False:
        return "gates failed"
    return task.stop_reason


def _headline(report: BenchReport) -> list[str]:
    failed = [t for t in report.thresholds if not t.passed]
    icon = ("❌ " if failed else "✅ ") if report.thresholds else ""
    lines = [f"## {icon}prime-ci bench: {_code(report.suite.name)}", ""]
    if report.recorded:
        model = f"**Model:** {RECORDED_NOTE}"
    elif report.model is not None:
        model = f"**Model:** {_code(report.model)}"
    else:
        model = "**Model:** each task's own (the suite's `model` keys)"
    scope = f"{report.suite.tasks} tasks"
    if report.shard:
        scope += f", shard {_code(report.shard)}"
    if report.merged_from:
        scope += f", merged from {len(report.merged_from)} shards"
    lines += [model, "",
              f"**Suite:** {scope} · **Runs:** {len(report.tasks)} · **Repeat:** {report.repeat} · "
              f"**Bench wall clock:** {format_duration(report.wall_s)}", ""]
    if failed:
        lines += ["**Threshold failed:** " + "; ".join(_threshold_text(t) for t in failed), ""]
    return lines


def _harness(report: BenchReport, summary: Summary, repeats: bool) -> list[str]:
    source = "no harness state" if summary.source == "none" else f"from {_code(summary.source)}"
    lines = [f"### Harness {_code(summary.harness)} ({source})", "",
             f"- **Solve rate:** {solve_rate_line(summary)}",
             f"- **Cost:** {usd_or_unknown(summary.cost_usd)} · **Tokens:** {summary.total_tokens:,} · "
             f"**Turns:** {summary.turns} · **Wall:** {format_duration(summary.wall_s)} (sum) · "
             f"**Median time-to-green:** {_ttg(summary.median_time_to_green_s)}"]
    groups: dict[str, list[str]] = {}
    for t in _ordered(t for t in report.tasks if t.harness == summary.harness and not t.solved):
        groups.setdefault(_failure(t), []).append(run_key(t.id, t.repeat, repeats=repeats))
    if groups:
        lines.append("- **Failures by stop reason:**")
        lines += [f"  - {_code(reason)} × {len(keys)}: {_keys(keys)}" for reason, keys in sorted(groups.items())]
    else:
        lines.append("- **Failures:** none")
    return [*lines, ""]


def _find(report: BenchReport, label: str) -> Summary | None:
    return next((s for s in report.harnesses if s.harness == label), None)


def _comparison(report: BenchReport, comparison: Comparison, repeats: bool) -> list[str]:
    base, cand = _find(report, comparison.baseline), _find(report, comparison.candidate)

    def col(summary: Summary | None, what: str) -> str:
        if summary is None:
            return "—"
        if what == "rate":
            return f"{summary.solved}/{summary.runs} = {_pct(summary.solve_rate)}"
        if what == "cost":
            return usd_or_unknown(summary.cost_usd)
        if what == "tokens":
            return f"{summary.total_tokens:,}"
        return format_duration(summary.wall_s)

    lines = [f"### A/B: {_code(comparison.baseline)} → {_code(comparison.candidate)} "
             f"({comparison.pairs} paired runs)", "",
             f"| | baseline {_code(comparison.baseline)} | candidate {_code(comparison.candidate)} | "
             "paired difference |", "|---|---|---|---|"]
    rows = [("solve rate", "rate", _signed(comparison.difference * 100, "{:.1f} pp")),
            ("cost", "cost", _signed_usd(comparison.cost_difference_usd)),
            ("tokens", "tokens", _signed(comparison.tokens_difference, "{:,.0f}")),
            ("wall (sum)", "wall", _signed_duration(comparison.wall_difference_s))]
    lines += [f"| {name} | {col(base, what)} | {col(cand, what)} | {diff} |" for name, what, diff in rows]
    iv = comparison.interval
    lines += ["",
              f"**Paired difference:** {_signed(comparison.difference * 100, '{:.1f}')} percentage points, "
              f"{iv.level * 100:g} % CI {_signed(iv.low * 100, '{:.1f}')} to {_signed(iv.high * 100, '{:.1f}')} "
              f"by {iv.method}; {comparison.test}: {_p(comparison.p_value)}."]
    if comparison.pairs and iv.low <= 0 <= iv.high:
        lines.append("The interval contains 0: at this sample size the bench cannot tell the two harnesses apart.")
    lines.append("")
    if not comparison.flips:
        lines += ["No task flips: every paired run has the same verdict under both harnesses.", ""]
        return lines
    fixed = sum(1 for f in comparison.flips if f.candidate)
    lines += [f"**Flips:** {len(comparison.flips)} of {comparison.pairs} paired runs ({fixed} newly solved, "
              f"{len(comparison.flips) - fixed} newly failed)", "",
              "| task | baseline → candidate |", "|---|---|"]
    for f in comparison.flips:
        mark = f"{'✓' if f.baseline else '✗'} → {'✓' if f.candidate else '✗'}"
        lines.append(f"| {_code(run_key(f.id, f.repeat, repeats=repeats))} | {mark} "
                     f"{'(newly solved)' if f.candidate else '(newly failed)'} |")
    return [*lines, ""]


_THRESHOLD_NAMES = {"min_solve_rate": "minimum solve rate", "max_regression": "maximum regression"}


def _threshold_value(check: ThresholdCheck, value: float) -> str:
    return _pct(value) if check.name == "min_solve_rate" else f"{value * 100:.1f} pp"


def _threshold_text(check: ThresholdCheck) -> str:
    relation = "≥" if check.name == "min_solve_rate" else "≤"
    return (f"{_THRESHOLD_NAMES.get(check.name, check.name)}: {_threshold_value(check, check.value)} "
            f"(limit {relation} {_threshold_value(check, check.limit)})")


def _thresholds(checks: list[ThresholdCheck]) -> list[str]:
    lines = ["### Thresholds", "", "| check | limit | value | result |", "|---|---|---|---|"]
    for c in checks:
        relation = "≥" if c.name == "min_solve_rate" else "≤"
        lines.append(f"| {_THRESHOLD_NAMES.get(c.name, _cell(c.name))} | {relation} "
                     f"{_threshold_value(c, c.limit)} | {_threshold_value(c, c.value)} | "
                     f"{'✅ pass' if c.passed else '❌ fail'} |")
    return [*lines, ""]


def _ordered(tasks: Iterable[TaskResult], harnesses: list[str] | None = None) -> list[TaskResult]:
    order = {h: i for i, h in enumerate(harnesses or [])}
    return sorted(tasks, key=lambda t: (t.index, t.id, t.repeat, order.get(t.harness, len(order)), t.harness))


def _link(run_dir: str) -> str:
    return f"[summary]({quote(run_dir.rstrip('/') + '/summary.md')})"


def _tasks(report: BenchReport) -> list[str]:
    with_repeat = report.repeat > 1 or any(t.repeat > 0 for t in report.tasks)
    head = ["task", "harness", *(["repeat"] if with_repeat else []), "solved", "stop reason", "cost", "tokens",
            "turns", "wall", "time-to-green", "run"]
    runs = f"{len(report.tasks)} run{'' if len(report.tasks) == 1 else 's'}"
    lines = [f"<details><summary>Per-task results ({runs})</summary>", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in _ordered(report.tasks, [s.harness for s in report.harnesses]):
        reason = _code(t.stop_reason)
        if t.hidden is not None and not t.hidden.passed:
            what = "hidden tests could not run" if t.hidden.error else "hidden tests failed"
            failing = f": {_keys(t.hidden.failing)}" if t.hidden.failing else ""
            reason += f" ([{what}]({quote(t.hidden.log)}){failing})"
        elif t.detail and not t.solved and t.stop_reason not in ("completed", "gates_failed"):
            reason += f" ({_cell(t.detail.splitlines()[0][:160])})"
        cells = [_code(t.id), _code(t.harness), *([str(t.repeat)] if with_repeat else []),
                 "✅" if t.solved else "❌", reason, usd_or_unknown(t.cost_usd), f"{t.total_tokens:,}", str(t.turns),
                 format_duration(t.wall_s), _ttg(t.time_to_green_s), _link(t.run_dir)]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", "</details>", ""]


def render(report: BenchReport) -> str:
    """The whole bench.md."""
    repeats = any(t.repeat > 0 for t in report.tasks)
    lines = _headline(report)
    for summary in report.harnesses:
        lines += _harness(report, summary, repeats)
    if report.comparison is not None:
        lines += _comparison(report, report.comparison, repeats)
    if report.thresholds:
        lines += _thresholds(report.thresholds)
    lines += _tasks(report)
    return visible("\n".join(lines).rstrip("\n") + "\n")
