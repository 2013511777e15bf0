"""``prime-ci harness list|show|log|rollback|trust`` and ``prime-ci refine``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import click

from prime_ci.cli.app import cli, echo_json, say
from prime_ci.cli.options import API_BASE, MODEL
from prime_ci.isolation.untrusted import visible


def _show(text: str, nl: bool = True) -> None:
    """Model-written harness text for a reviewer's terminal: hidden and control characters shown, not obeyed."""
    click.echo(visible(text), nl=nl)


def _harness_store(path: Path, *, must_exist: bool = True) -> Any:
    from prime_ci.harness.store import HarnessStore

    if must_exist and not path.is_dir():
        raise click.UsageError(f"--harness: directory not found: {path}")
    return HarnessStore(path)


def _echo_diff(store: Any, changeset: Any) -> None:
    for op in changeset.ops:
        rel = store.path(op.kind, op.name).relative_to(store.root).as_posix()
        _show(op.diff(rel), nl=False)


HARNESS_DIR = click.option("--harness", "harness_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
                           help="Harness state directory.")
HARNESS_KINDS = click.Choice(["prompt", "memory", "skill", "subagent"])


@cli.group("harness")
def harness_group() -> None:
    """Inspect, review and roll back the continual harness."""


@harness_group.command("list")
@HARNESS_DIR
def harness_list(harness_dir: Path) -> int:
    """List the entries: kind, name, trust, description."""
    from prime_ci.harness.frontmatter import one_line

    entries = _harness_store(harness_dir).list()
    for e in entries:
        _show(f"{e.kind:<9} {e.name:<28} {e.trust:<9} {one_line(e.description, 80)}")
    if not entries:
        say("the harness has no entries")
    return 0


@harness_group.command("show")
@click.argument("kind", type=HARNESS_KINDS)
@click.argument("name")
@HARNESS_DIR
def harness_show(kind: str, name: str, harness_dir: Path) -> int:
    """Print one entry file (frontmatter and body)."""
    _show(_harness_store(harness_dir).read(kind, name).render(), nl=False)
    return 0


@harness_group.command("log")
@HARNESS_DIR
@click.option("--json", "json_output", is_flag=True, help="Print the change sets as JSON lines.")
def harness_log(harness_dir: Path, json_output: bool) -> int:
    """List the change sets, newest first."""
    from prime_ci.harness.frontmatter import one_line

    for cs in reversed(_harness_store(harness_dir).history()):
        if json_output:
            echo_json(json.dumps(cs.to_json(), ensure_ascii=False))
            continue
        _show(f"{cs.id}  {cs.ts}  {cs.trigger:<8}  run {cs.source_run or '-'}  {one_line(cs.rationale, 70)}")
        for op in cs.ops:
            _show(f"    {op.op:<6} {op.target}" + (f"  ({one_line(op.evidence, 70)})" if op.evidence else ""))
    return 0


@harness_group.command("rollback")
@click.argument("changeset_id", metavar="ID")
@HARNESS_DIR
def harness_rollback(changeset_id: str, harness_dir: Path) -> int:
    """Restore the state before change set ID (recorded as a new change set)."""
    from rich.markup import escape

    store = _harness_store(harness_dir)
    cs = store.rollback(changeset_id, source_run="cli")
    _echo_diff(store, cs)
    say(f"rolled back {escape(changeset_id)} as {cs.id}")
    return 0


@harness_group.command("trust")
@click.argument("kind", type=HARNESS_KINDS)
@click.argument("name")
@HARNESS_DIR
def harness_trust(kind: str, name: str, harness_dir: Path) -> int:
    """Mark a reviewed entry trusted so that runs load it."""
    from rich.markup import escape

    cs = _harness_store(harness_dir).trust(kind, name, source_run="cli")
    say(f"{kind}:{escape(name)} " + (f"marked trusted ({cs.id})" if cs else "was already trusted"))
    return 0


@cli.command("refine")
@click.argument("session", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@HARNESS_DIR
@MODEL
@API_BASE
@click.option("--instructions", help="What the refinement should focus on.")
@click.option("--propose-to", type=click.Path(dir_okay=False, path_type=Path), help="Write a PR body here.")
@click.option("--untrusted", is_flag=True, help="The session read untrusted input: new entries are untrusted.")
@click.option("--bench", "bench_suite", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Then bench the harness before against after on this suite (A/B); the report goes into "
              "--propose-to too.")
@click.option("--bench-out", type=click.Path(file_okay=False, path_type=Path), default=Path("prime-ci-bench"),
              show_default=True, help="Where that bench writes.")
def refine_cmd(session: Path, harness_dir: Path, model: str | None, api_base: str | None, instructions: str | None,
               propose_to: Path | None, untrusted: bool, bench_suite: Path | None, bench_out: Path) -> int:
    """Refine the harness from a finished session (one model call); print the diff."""
    import asyncio

    from rich.markup import escape

    from prime_ci.harness.branch import write_pr_body
    from prime_ci.harness.refine import refine, session_run_id, session_untrusted
    from prime_ci.model.routes import make_model
    from prime_ci.session.log import read_session

    if not model:
        raise click.UsageError("--model is required (or set PRIME_CI_MODEL)")
    store = _harness_store(harness_dir, must_exist=False)
    before = _snapshot(harness_dir) if bench_suite is not None else None
    parsed = read_session(session)
    trust = "untrusted" if untrusted or session_untrusted(parsed) else "trusted"
    outcome = asyncio.run(refine(make_model(model, api_base=api_base), store, session, instructions=instructions,
                                 source_run=session_run_id(parsed, session), trust=trust))
    if outcome.changeset is None:
        say(f"[red]plan rejected[/]: {escape(outcome.reason or '')} (recorded as {outcome.rejection_id} in "
             f"{escape(str(store.rejected_path))})")
        return 1
    cs = outcome.changeset
    _echo_diff(store, cs)
    if propose_to is not None:
        write_pr_body(propose_to, [cs], cs.rationale)
    say(f"applied {cs.id} ({len(cs.ops)} ops, {trust}); undo with: prime-ci harness rollback {cs.id} "
         f"--harness {escape(str(harness_dir))}")
    if bench_suite is None or before is None:
        return 0
    from prime_ci.bench.bench_report import Thresholds
    from prime_ci.cli.bench_cmd import run_bench

    # a recorded refinement model is no task model: the suite's own models or recordings run the tasks then
    task_model = None if model.startswith("replay:") else model
    say(f"bench: the harness before {cs.id} against after it, on {escape(str(bench_suite))}")
    try:
        report = run_bench(bench_suite, [str(before), str(harness_dir)], Path("."), task_model, api_base, jobs=2,
                           repeat=1, shard=None, mirror=None, sandbox="auto", out=bench_out, limits=Thresholds(),
                           attach_to=propose_to)
    finally:
        shutil.rmtree(before.parent, ignore_errors=True)
    return 130 if report is None else 0


def _snapshot(harness_dir: Path) -> Path:
    """The harness state as it is now, kept for the bench that compares it with the refined one."""
    import tempfile

    dest = Path(tempfile.mkdtemp(prefix="prime-ci-harness-before-")) / "before"
    if harness_dir.is_dir():
        shutil.copytree(harness_dir, dest, symlinks=True)
    else:
        dest.mkdir()
    return dest
