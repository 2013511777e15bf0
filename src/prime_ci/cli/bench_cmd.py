"""``prime-ci bench``: a task suite, N runs at a time, a verdict per task, a report; A/B, shards, merge."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from prime_ci.cli.app import cli, console, echo_json, host_setup, say
from prime_ci.cli.options import API_BASE, JSON, MODEL, OUT, POS, PYTHON, SANDBOX
from prime_ci.cli.params import PanelCommand, PanelOption
from prime_ci.durations import format_duration
from prime_ci.errors import ConfigError
from prime_ci.money import usd

if TYPE_CHECKING:
    from prime_ci.bench.model import BenchReport

SHARD = re.compile(r"^(\d+)/(\d+)$")


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    m = SHARD.match(value)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise click.BadParameter(f"expected i/N with 1 <= i <= N, got {value!r}")
    return int(m.group(1)), int(m.group(2))


FRACTION = click.FloatRange(0, 1)


@cli.command(cls=PanelCommand)
@click.argument("args", nargs=-1, metavar="SUITE | --demo | --merge DIR...")
@click.option("--demo", is_flag=True, cls=PanelOption, panel="Suite", help="The bundled suite: small Python and "
              "JavaScript repositories, replayed recordings, an A/B of two bundled harness states.")
@click.option("--merge", is_flag=True, cls=PanelOption, panel="Suite", help="Join the bench.json of shard "
              "directories (the arguments) into one report in --out.")
@click.option("--harness", "harnesses", multiple=True, cls=PanelOption, panel="Harness", help="Harness state: a "
              "directory, or a harness branch of --harness-repo (repeatable: the first is the baseline, the last "
              "the candidate).")
@click.option("--harness-repo", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, cls=PanelOption, panel="Harness", help="The repository whose harness branches "
              "--harness names.")
@MODEL.but(help="Model for every task (default: each task's model or recorded session).")
@API_BASE
@click.option("--jobs", type=POS, metavar="N", default=min(4, os.cpu_count() or 1),
              show_default="4, or the cores if fewer", cls=PanelOption, panel="Suite", help="Runs at a time.")
@click.option("--repeat", type=POS, metavar="N", default=1, show_default=True, cls=PanelOption, panel="Suite",
              help="Runs per task and harness (own seeds).")
@click.option("--shard", callback=_shard, metavar="i/N", cls=PanelOption, panel="Suite",
              help="Run every N-th task, starting with the i-th.")
@click.option("--mirror", type=click.Path(file_okay=False, path_type=Path), cls=PanelOption, panel="Suite",
              help="Local clones for SWE-bench instances (owner__name, owner/name or name).")
@click.option("--task-files-from", "task_roots", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              cls=PanelOption, panel="Suite", help="A directory outside the suite's own whose files a task's "
              "task_file may name (repeatable; their text is sent to the model).")
@PYTHON.but(help="The interpreter of tasks that name none (default: each run's own choice: REPO's .venv, else "
            "python3 on PATH).")
@SANDBOX
@OUT.but(type=click.Path(file_okay=False, path_type=Path), default=Path("prime-ci-bench"), show_default=True,
         help="Report, runs and records; a bench run again into it continues.")
@click.option("--min-solve-rate", type=FRACTION, cls=PanelOption, panel="Output", help="Exit 1 when the "
              "candidate's solve rate is below this.")
@click.option("--max-regression", type=FRACTION, cls=PanelOption, panel="Output", help="Exit 1 when the "
              "candidate's solve rate is more than this below the baseline's (paired).")
@click.option("--attach-to", type=click.Path(dir_okay=False, path_type=Path), cls=PanelOption, panel="Output",
              help="Also put the report into this markdown file (e.g. harness-pr.md), replacing the bench "
              "section an earlier bench put there.")
@JSON.but(help="Print bench.json on stdout at the end.")
def bench(args: tuple[str, ...], demo: bool, merge: bool, harnesses: tuple[str, ...], harness_repo: Path,
          model: str | None, api_base: str | None, jobs: int, repeat: int, shard: tuple[int, int] | None,
          mirror: Path | None, task_roots: tuple[Path, ...], python: str | None, sandbox: str, out: Path,
          min_solve_rate: float | None, max_regression: float | None, attach_to: Path | None,
          json_output: bool) -> int:
    """Run a task suite (TOML, JSONL, or SWE-bench instances) as ordinary runs and report solve rates; with two
    --harness, a paired A/B. Exit 0 when it finished, 1 when --min-solve-rate/--max-regression fail."""
    from prime_ci.bench import bench_report as reports

    limits = reports.Thresholds(min_solve_rate, max_regression)
    if merge:
        if not args or demo:
            raise click.UsageError("--merge takes the shard directories as arguments")
        result = reports.merge([Path(a) for a in args], out, limits)
        reports.write(result, out, attach_to)
        return _finish(result, out, json_output)
    if demo == bool(args) or len(args) > 1:
        raise click.UsageError("give one SUITE file, or --demo")
    report = run_bench(Path(args[0]) if args else None, list(harnesses), harness_repo, model, api_base, jobs, repeat,
                     shard, mirror, sandbox, out, limits, attach_to, python, list(task_roots))
    return 130 if report is None else _finish(report, out, json_output)


def run_bench(suite_path: Path | None, harnesses: list[str], harness_repo: Path, model: str | None,
              api_base: str | None, jobs: int, repeat: int, shard: tuple[int, int] | None, mirror: Path | None,
              sandbox: str, out: Path, limits: Any, attach_to: Path | None = None,
              python: str | None = None, task_roots: list[Path] | None = None) -> BenchReport | None:
    """A bench to its report (OUT/bench.json, bench.md, and the report returned); None when it was interrupted.
    Thresholds are the caller's to act on."""
    from prime_ci.bench import bench_report as reports
    from prime_ci.bench import preflight
    from prime_ci.bench.driver import RETRY, Driver, Interrupted, Plan
    from prime_ci.bench.model import SuiteInfo
    from prime_ci.bench.suite import load_suite
    from prime_ci.model.credentials import model_problem

    started = time.monotonic()
    if suite_path is None:
        from prime_ci.bench_demo import SUITE, harness_dirs

        suite_path = SUITE
        harnesses = harnesses or harness_dirs()
    suite = load_suite(suite_path, mirror=mirror, task_roots=task_roots)
    if model and (problem := model_problem(model, api_base)):
        raise ConfigError(problem)
    host_setup()
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(suite, out, preflight.harness_states(out, harnesses, harness_repo), model, api_base, repeat, shard,
                sandbox, python)
    jobs_all = plan.jobs()
    if not jobs_all:
        raise ConfigError(f"--shard {shard[0]}/{shard[1]} has no tasks: the suite has {len(suite.tasks)}"
                          if shard else "the suite has no tasks")
    preflight.check_state(plan)
    recorded = plan.recorded()  # also: every job has a model, before anything runs
    preflight.materialize(plan)
    driver = Driver(plan, jobs, lambda *_: None)
    earlier = len(driver.finished)
    tasks = len(jobs_all) // (len(plan.harnesses) * repeat)
    say(f"bench {escape(suite.name)}: {_n(len(jobs_all), 'run')} ({_n(tasks, 'task')}"
        f"{f' of shard {shard[0]}/{shard[1]}' if shard else ''} x {_n(len(plan.harnesses), 'harness state')} x "
        f"{repeat}){f', {earlier} finished earlier' if earlier else ''}, {jobs} at a time -> {out}")
    if recorded:
        say("model: recorded sessions (replay) - the numbers show the machinery, not a model's ability")
    try:
        with _bar(len(jobs_all)) as progress:
            driver.progress = progress
            results = asyncio.run(driver.run())
    except Interrupted as exc:
        preflight.add_wall(out, time.monotonic() - started)
        say(f"interrupted: {exc}; run the same command again to finish them")
        return None
    unjudged = [r for r in results if r.stop_reason in RETRY or (r.hidden is not None and r.hidden.error)]
    if unjudged:
        why = ", ".join(sorted({r.stop_reason if r.stop_reason in RETRY else "hidden tests could not run"
                                for r in unjudged}))
        say(f"[yellow]warning:[/] {_n(len(unjudged), 'run')} gave no verdict ({why}): counted as unsolved here; "
            "run the same command again to retry them")
    report = reports.build(
        SuiteInfo(name=suite.name, path=str(suite.path), sha256=suite.sha256, tasks=len(suite.tasks)),
        [(h.label, h.source) for h in plan.harnesses], results, model=model, recorded=recorded, repeat=repeat,
        shard=f"{shard[0]}/{shard[1]}" if shard else None, wall_s=preflight.add_wall(out, time.monotonic() - started),
        limits=limits)
    reports.write(report, out, attach_to)
    return report


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"



@contextlib.contextmanager
def _bar(total: int) -> Iterator[Callable[[Any, int, int], None]]:
    """A progress bar on a terminal; in CI logs, a line per finished run."""

    def line(result: Any, done: int, total: int) -> str:
        verdict = "[green]solved[/]" if result.solved else "[red]unsolved[/]"
        cost = "" if result.cost_usd is None else f", {usd(result.cost_usd)}"
        why = result.stop_reason
        if result.detail and not result.solved:
            why += f": {escape(result.detail.splitlines()[0][:160])}"
        return (f"\\[{done}/{total}] {escape(result.id)} @{escape(result.harness)}"
                f"{f' r{result.repeat}' if result.repeat else ''}: {verdict} ({why}; {result.turns} "
                f"turns, {format_duration(result.wall_s)}{cost})")

    if not sys.stderr.isatty():
        yield lambda result, done, total: say(line(result, done, total))
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("prime-ci bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console(), transient=True) as bar:
        task = bar.add_task("runs", total=total)

        def advance(result: Any, done: int, total: int) -> None:
            bar.console.print(line(result, done, total))
            bar.update(task, completed=done)

        yield advance


def _finish(report: Any, out: Path, json_output: bool) -> int:
    from prime_ci.bench.markdown import solve_rate_line

    for summary in report.harnesses:
        say(f"{summary.harness}: {solve_rate_line(summary)}")
    if report.comparison is not None:
        c = report.comparison
        say(f"A/B {escape(c.candidate)} vs {escape(c.baseline)}: {c.difference * 100:+.1f} pp over "
            f"{_n(c.pairs, 'pair')}, {_n(len(c.flips), 'flip')}, p = {c.p_value:.3g}")
    failed = [t for t in report.thresholds if not t.passed]
    for check in failed:
        say(f"[red]{check.name} failed[/]: {check.value:.1%} against the limit {check.limit:.1%}")
    say(f"report: {out / 'bench.md'}")
    if json_output:
        echo_json(json.dumps(report.model_dump(mode="json"), indent=2))
    sys.stdout.flush()
    return 1 if failed else 0
