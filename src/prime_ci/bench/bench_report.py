"""bench.json and bench.md from task results: of one bench, or of shards joined (``--merge``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from prime_ci.bench import markdown, stats
from prime_ci.bench.model import BenchReport, SuiteInfo, TaskResult
from prime_ci.errors import ConfigError
from prime_ci.isolation import durable


@dataclass(frozen=True)
class Thresholds:
    min_solve_rate: float | None = None
    max_regression: float | None = None


def build(suite: SuiteInfo, harnesses: list[tuple[str, str]], results: list[TaskResult], *, model: str | None,
          recorded: bool, repeat: int, shard: str | None, wall_s: float, limits: Thresholds,
          merged_from: list[str] | None = None) -> BenchReport:
    """``harnesses``: (label, source) in the order given; the first is the baseline, the last the candidate."""
    order = {label: i for i, (label, _) in enumerate(harnesses)}
    tasks = sorted(results, key=lambda r: (r.index, r.id, r.repeat, order.get(r.harness, len(order))))
    summaries = [stats.summarize(label, source, [r for r in tasks if r.harness == label])
                 for label, source in harnesses]
    candidate = summaries[-1]
    comparison = stats.compare(harnesses[0][0], harnesses[-1][0], tasks) if len(harnesses) > 1 else None
    try:
        checks = stats.thresholds(candidate.solve_rate, comparison, min_solve_rate=limits.min_solve_rate,
                                  max_regression=limits.max_regression)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return BenchReport(suite=suite, model=model, recorded=recorded, repeat=repeat, shard=shard,
                       merged_from=merged_from or [], solve_rate=candidate.solve_rate,
                       solve_rate_interval=candidate.interval, harnesses=summaries, comparison=comparison,
                       thresholds=checks, tasks=tasks, wall_s=round(wall_s, 3))


BEGIN, END = "<!-- prime-ci bench -->", "<!-- /prime-ci bench -->"


def write(report: BenchReport, out: Path, attach_to: Path | None = None) -> None:
    text = markdown.render(report)
    durable.write(out / "bench.json", report.model_dump_json(indent=2) + "\n", redacted=True)
    durable.write(out / "bench.md", text, redacted=True)
    if attach_to is not None:
        attach(attach_to, text)


def attach(path: Path, text: str) -> None:
    """Put the report into a markdown file (a PR body): in place of the section an earlier bench left, else at
    its end."""
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    section = f"{BEGIN}\n{text.rstrip()}\n{END}\n"
    start, end = before.find(BEGIN), before.find(END)
    if 0 <= start < end:
        updated = before[:start] + section + before[end + len(END):].lstrip("\n")
    else:
        updated = before.rstrip("\n") + ("\n\n" if before.strip() else "") + section
    durable.write(path, updated, redacted=True)


def read(out: Path) -> BenchReport:
    path = out / "bench.json"
    try:
        return BenchReport.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"--merge: {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise ConfigError(f"--merge: {path} is not a bench.json of this version: {exc.errors()[0]['msg']}") from None


def merge(dirs: list[Path], out: Path, limits: Thresholds) -> BenchReport:
    """One report of the shards of one bench: the same suite (by hash), harnesses, model and repeat; every run
    once. Run directories stay where they are: the merged report links them relative to OUT."""
    parts = [(d, read(d)) for d in dirs]
    first = parts[0][1]
    shards = [p.shard for _, p in parts]
    counts = {s.split("/")[1] for s in shards if s}
    if None in shards or len(counts) != 1:
        raise ConfigError("--merge joins the shards of one bench (each run with --shard i/N, the same N); got "
                          + ", ".join(f"{d}: {p.shard or 'not a shard'}" for d, p in parts))
    total = int(counts.pop())
    twice = sorted({str(s) for s in shards if shards.count(s) > 1})
    if twice:
        raise ConfigError(f"--merge: shard {', '.join(twice)} given twice")
    missing = sorted(set(range(1, total + 1)) - {int(str(s).split("/")[0]) for s in shards})
    if missing:
        raise ConfigError(f"--merge: shard(s) {', '.join(f'{i}/{total}' for i in missing)} missing: a partial "
                          "report would pass thresholds on part of the suite")
    same = ("suite.sha256", "model", "repeat", "harnesses")
    for d, part in parts[1:]:
        differs = [name for name, a, b in (
            ("suite.sha256", part.suite.sha256, first.suite.sha256), ("model", part.model, first.model),
            ("repeat", part.repeat, first.repeat),
            ("harnesses", [h.harness for h in part.harnesses], [h.harness for h in first.harnesses]),
        ) if a != b]
        if differs:
            raise ConfigError(f"--merge: {d} is not a shard of the same bench as {parts[0][0]} "
                              f"({', '.join(differs)} differ; compared: {', '.join(same)})")
    seen: dict[tuple[str, str, int], Path] = {}
    results: list[TaskResult] = []
    for d, part in parts:
        for task in part.tasks:
            key = (task.id, task.harness, task.repeat)
            if key in seen:
                raise ConfigError(f"--merge: {task.id} ({task.harness}, repeat {task.repeat}) is in both {seen[key]} "
                                  f"and {d}")
            seen[key] = d
            results.append(_moved(task, d, out))
    harnesses = [(h.harness, h.source) for h in first.harnesses]
    return build(first.suite, harnesses, results, model=first.model, recorded=all(p.recorded for _, p in parts),
                 repeat=first.repeat, shard=None, wall_s=sum(p.wall_s for _, p in parts), limits=limits,
                 merged_from=[str(d) for d in dirs])


def _moved(task: TaskResult, shard_out: Path, out: Path) -> TaskResult:
    def rel(path: str) -> str:
        return os.path.relpath(shard_out.resolve() / path, out.resolve())

    hidden = task.hidden.model_copy(update={"log": rel(task.hidden.log)}) if task.hidden else None
    return task.model_copy(update={"run_dir": rel(task.run_dir), "hidden": hidden})
