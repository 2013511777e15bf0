"""Command line: click commands and exit codes, nothing else."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from prime_ci import __version__
from prime_ci.errors import PrimeCIError

POS = click.IntRange(min=1)
NONNEG = click.IntRange(min=0)


@functools.cache
def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _say(text: str) -> None:
    if sys.stderr.isatty():
        _console().print(f"[dim]prime-ci:[/dim] {text}", markup=True)
    else:  # CI logs: plain lines, without rich's per-line rendering cost (nor its markup parser if no tags)
        if "[" in text:
            from rich.markup import render

            text = render(text).plain
        sys.stderr.write(f"prime-ci: {text}\n")
        sys.stderr.flush()


def _host_setup() -> None:
    """Secrets to mask in every artifact; adopt orphans (setsid escapees) so they can be reaped."""
    from prime_ci.isolation import redact
    from prime_ci.isolation.procs import enable_subreaper
    from prime_ci.isolation.sandbox import make_undumpable

    redact.register_environment()
    enable_subreaper()
    make_undumpable()


def _finish(result: dict[str, Any], as_json: bool) -> int:
    code = int(result["exit_code"])
    color = "green" if code == 0 else "red"
    usage = result["usage"]
    _say(f"[bold {color}]{result['stop_reason']}[/] (exit {code}) · {usage['turns']} turns · "
         f"{usage['total_tokens']} tokens · {result['wall_s']:.1f}s · artifacts: {result['out_dir']}")
    if as_json:
        click.echo(json.dumps(result, indent=2))
    return code


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="prime-ci")
def cli() -> None:
    """prime-ci: let a model work on a repository in CI until quality gates pass or a budget runs out."""


@cli.command()
@click.argument("repo", default=".")
@click.option("--ref", help="Commit or branch to start from (default: REPO's HEAD).")
@click.option("--task", help="The instruction.")
@click.option("--task-file", type=click.Path(path_type=Path), help="Read the instruction from a file.")
@click.option("--untrusted-file", type=click.Path(path_type=Path), help="PR/issue text, fenced as data.")
@click.option("--model", envvar="PRIME_CI_MODEL", help="litellm model id, or replay:SESSION.jsonl.")
@click.option("--api-base", envvar="PRIME_CI_API_BASE", help="Provider base URL.")
@click.option("--gate", multiple=True, help="Shell command that must exit 0 (repeatable).")
@click.option("--gates-file", multiple=True, help="TOML file of [[gate]] tables (repeatable).")
@click.option("--gates-from", help="Read gate files from this commit instead of the worktree.")
@click.option("--max-turns", type=POS, default=40, show_default=True, help="Root model calls.")
@click.option("--max-tokens", type=POS, default=2_000_000, show_default=True, help="Tokens, children included.")
@click.option("--max-wall", default="30m", show_default=True, help="Wall clock for the whole run.")
@click.option("--max-cost", type=click.FloatRange(min=0, min_open=True), help="Spend cap in USD.")
@click.option("--cell-timeout", default="5m", show_default=True, help="One kernel cell.")
@click.option("--max-gate-retries", type=NONNEG, default=3, show_default=True, help="Failed rounds fed back.")
@click.option("--max-depth", type=NONNEG, default=1, show_default=True, help="rlm depth.")
@click.option("--max-children", type=POS, default=4, show_default=True, help="rlm children alive at once.")
@click.option("--context-window", type=click.IntRange(min=1000), help="Compact near this many tokens (default: "
              "the model's window from litellm, else 128000).")
@click.option("--out", type=click.Path(path_type=Path), help="Artifacts directory.")
@click.option("--harness", type=click.Path(path_type=Path), help="Harness state directory.")
@click.option("--harness-branch", help="Load/commit harness state on this branch of REPO.")
@click.option("--propose", is_flag=True, help="Commit harness changes to a proposals branch.")
@click.option("--push", is_flag=True, help="Push what was committed to origin.")
@click.option("--refine", is_flag=True, help="Run one refinement at the end.")
@click.option("--sandbox", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--pass-env", multiple=True, help="Let one environment variable reach the kernel and gates.")
@click.option("--require-changes", is_flag=True, help="An empty diff is a failure (exit 8).")
@click.option("--allow-protected", multiple=True, help="Glob of protected paths the run may change.")
@click.option("--keep-worktree", is_flag=True, help="Keep the worktree.")
@click.option("--setup", multiple=True, help="Trusted command preparing the worktree before the first model call "
              "(repeatable; network on, even in the sandbox).")
@click.option("--python", help="The project's interpreter for gates, setup and shell commands (default: REPO's "
              ".venv, else python3 on PATH).")
@click.option("--sandbox-ro", multiple=True, help="Extra path visible read-only in the sandbox (repeatable).")
@click.option("--include-dirty", is_flag=True, help="Start from a snapshot of REPO's uncommitted working tree.")
@click.option("--json", "json_output", is_flag=True, help="Print result.json on stdout at the end.")
@click.pass_context
def run(ctx: click.Context, /, **params: Any) -> int:
    """Clone REPO into a disposable worktree and let the model work there."""
    from prime_ci.engine.prepare import prepare
    from prime_ci.engine.run import execute

    flags = {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in params.items()
        if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
        or name == "repo"
    }
    _host_setup()
    prep = prepare(flags)  # a litellm route starts importing litellm here, overlapping the kernel start
    _say(f"run {prep.run_id}: {prep.worktree.source} @ {prep.worktree.base_commit[:12]} -> {prep.out}")
    if prep.worktree.dirty:
        from rich.markup import escape

        from prime_ci.artifacts.report import dirty_note

        _say(f"[yellow]warning:[/] {escape(dirty_note(prep.worktree.dirty, prep.worktree.snapshot_of is not None))}")
    return _finish(execute(prep, _say), params["json_output"])


@cli.command()
@click.option("--out", type=click.Path(path_type=Path), help="Artifacts directory.")
@click.option("--json", "json_output", is_flag=True, help="Print result.json on stdout at the end.")
def demo(out: Path | None, json_output: bool) -> int:
    """Run the bundled demo repository with the bundled replay model (no key, no network)."""
    from prime_ci.demo import demo_flags
    from prime_ci.engine.prepare import prepare
    from prime_ci.engine.run import execute

    _host_setup()
    flags, cleanup = demo_flags(out)
    try:
        prep = prepare(flags)
        _say(f"demo run {prep.run_id}: a failing test, a replayed model that fixes it -> {prep.out}")
        return _finish(execute(prep, _say), json_output)
    finally:
        cleanup()


@cli.command()
@click.argument("session", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def show(session: Path) -> int:
    """Render a session log for a person."""
    from prime_ci.session.show import render

    render(session)
    return 0


@cli.command()
@click.argument("which", type=click.Choice(["result", "session", "gates", "refine", "all"]), default="all")
def schema(which: str) -> int:
    """Print the JSON Schema of result.json, session entries, gate files and refine plans."""
    from prime_ci.artifacts.schemas import schemas

    all_schemas = schemas()
    click.echo(json.dumps(all_schemas if which == "all" else all_schemas[which], indent=2))
    return 0


@cli.command()
@click.option("--gate", multiple=True, help="Shell command that must exit 0 (repeatable).")
@click.option("--gates-file", multiple=True, type=click.Path(path_type=Path), help="TOML [[gate]] file.")
@click.option("--junit", type=click.Path(path_type=Path), help="Write a JUnit report here.")
@click.option("--logs", type=click.Path(path_type=Path), default=Path("prime-ci-out/gates"), show_default=True)
@click.option("--sandbox", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--python", help="The project's interpreter (default: ./.venv, else python3 on PATH).")
@click.option("--sandbox-ro", multiple=True, help="Extra path visible read-only in the sandbox (repeatable).")
@click.option("--pass-env", multiple=True, help="Let one environment variable reach the gates.")
@click.option("--json", "json_output", is_flag=True, help="Print the results as JSON.")
def gates(
    gate: tuple[str, ...], gates_file: tuple[Path, ...], junit: Path | None, logs: Path, sandbox: str,
    python: str | None, sandbox_ro: tuple[str, ...], pass_env: tuple[str, ...], json_output: bool,
) -> int:
    """Run gates alone, in the current directory, with the same semantics as in a run: the project's
    interpreter, the scrubbed environment and the sandbox (the current directory writable)."""
    import asyncio

    from prime_ci.engine.environment import Standalone, standalone
    from prime_ci.gates.junit import github_annotations, write_gates_junit
    from prime_ci.gates.runner import gates_from_commands, load_gate_files

    specs = gates_from_commands(list(gate)) + load_gate_files(list(gates_file))
    if not specs:
        raise click.UsageError("no gates: give --gate or --gates-file")
    options = Standalone(sandbox=sandbox, python=python, sandbox_ro=list(sandbox_ro), pass_env=list(pass_env))
    results = asyncio.run(standalone(specs, Path.cwd(), logs.resolve(), options, _say))
    for r in results:
        state = "pass" if r.passed else ("timeout" if r.timed_out else "FAIL")
        _say(f"gate {r.name}: {state}{' (flaky)' if r.flaky else ''} exit {r.exit_code} in {r.duration_s:.1f}s "
             f"-> {r.log_path}")
    if junit is not None:
        write_gates_junit(results, junit)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(results):
            click.echo(line)
    if json_output:
        click.echo(json.dumps([r.to_dict() for r in results], indent=2, default=str))
    return 0 if all(r.passed for r in results) else 1


@cli.command(hidden=True)
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def child(spec: Path) -> int:
    """Internal: the entry point of an rlm child process."""
    from prime_ci.child import main as child_main

    return child_main(spec)


def _harness_store(path: Path, *, must_exist: bool = True) -> Any:
    from prime_ci.harness.store import HarnessStore

    if must_exist and not path.is_dir():
        raise click.UsageError(f"--harness: directory not found: {path}")
    return HarnessStore(path)


def _echo_diff(store: Any, changeset: Any) -> None:
    for op in changeset.ops:
        rel = store.path(op.kind, op.name).relative_to(store.root).as_posix()
        click.echo(op.diff(rel), nl=False)


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
        click.echo(f"{e.kind:<9} {e.name:<28} {e.trust:<9} {one_line(e.description, 80)}")
    if not entries:
        _say("the harness has no entries")
    return 0


@harness_group.command("show")
@click.argument("kind", type=HARNESS_KINDS)
@click.argument("name")
@HARNESS_DIR
def harness_show(kind: str, name: str, harness_dir: Path) -> int:
    """Print one entry file (frontmatter and body)."""
    click.echo(_harness_store(harness_dir).read(kind, name).render(), nl=False)
    return 0


@harness_group.command("log")
@HARNESS_DIR
@click.option("--json", "json_output", is_flag=True, help="Print the change sets as JSON lines.")
def harness_log(harness_dir: Path, json_output: bool) -> int:
    """List the change sets, newest first."""
    from prime_ci.harness.frontmatter import one_line

    for cs in reversed(_harness_store(harness_dir).history()):
        if json_output:
            click.echo(json.dumps(cs.to_json(), ensure_ascii=False))
            continue
        click.echo(f"{cs.id}  {cs.ts}  {cs.trigger:<8}  run {cs.source_run or '-'}  {one_line(cs.rationale, 70)}")
        for op in cs.ops:
            click.echo(f"    {op.op:<6} {op.target}" + (f"  ({one_line(op.evidence, 70)})" if op.evidence else ""))
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
    _say(f"rolled back {escape(changeset_id)} as {cs.id}")
    return 0


@harness_group.command("trust")
@click.argument("kind", type=HARNESS_KINDS)
@click.argument("name")
@HARNESS_DIR
def harness_trust(kind: str, name: str, harness_dir: Path) -> int:
    """Mark a reviewed entry trusted so that runs load it."""
    from rich.markup import escape

    cs = _harness_store(harness_dir).trust(kind, name, source_run="cli")
    _say(f"{kind}:{escape(name)} " + (f"marked trusted ({cs.id})" if cs else "was already trusted"))
    return 0


@cli.command("refine")
@click.argument("session", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@HARNESS_DIR
@click.option("--model", envvar="PRIME_CI_MODEL", help="litellm model id, or replay:SESSION.jsonl.")
@click.option("--api-base", envvar="PRIME_CI_API_BASE", help="Provider base URL.")
@click.option("--instructions", help="What the refinement should focus on.")
@click.option("--propose-to", type=click.Path(dir_okay=False, path_type=Path), help="Write a PR body here.")
@click.option("--untrusted", is_flag=True, help="The session read untrusted input: new entries are untrusted.")
def refine_cmd(session: Path, harness_dir: Path, model: str | None, api_base: str | None, instructions: str | None,
               propose_to: Path | None, untrusted: bool) -> int:
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
    parsed = read_session(session)
    trust = "untrusted" if untrusted or session_untrusted(parsed) else "trusted"
    outcome = asyncio.run(refine(make_model(model, api_base=api_base), store, session, instructions=instructions,
                                 source_run=session_run_id(parsed, session), trust=trust))
    if outcome.changeset is None:
        _say(f"[red]plan rejected[/]: {escape(outcome.reason or '')} (recorded as {outcome.rejection_id} in "
             f"{escape(str(store.rejected_path))})")
        return 1
    cs = outcome.changeset
    _echo_diff(store, cs)
    if propose_to is not None:
        write_pr_body(propose_to, [cs], cs.rationale)
    _say(f"applied {cs.id} ({len(cs.ops)} ops, {trust}); undo with: prime-ci harness rollback {cs.id} "
         f"--harness {escape(str(harness_dir))}")
    return 0


@cli.command()
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--salvage", is_flag=True, help="Keep the valid records around damage in the middle of the log.")
@click.option("--json", "json_output", is_flag=True, help="Print result.json on stdout at the end.")
def resume(out_dir: Path, salvage: bool, json_output: bool) -> int:
    """Continue an interrupted run from its artifacts directory (a finished run returns its result)."""
    from prime_ci.engine.prepare import prepare_resume
    from prime_ci.engine.run import execute

    _host_setup()
    prepared = prepare_resume(out_dir, salvage=salvage)
    if isinstance(prepared, dict):
        _say(f"run in {out_dir} had already finished")
        return _finish({"out_dir": str(out_dir), "wall_s": 0.0, "usage": {"turns": 0, "total_tokens": 0},
                        **prepared}, json_output)
    prep, state = prepared
    _say(f"resuming run {prep.run_id} after {len(state.session.entries)} entries -> {prep.out}")
    return _finish(execute(prep, _say, resume=state, salvage=salvage), json_output)


def main() -> None:
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.ClickException as exc:
        click.echo(f"prime-ci: error: {exc.format_message()}", err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except PrimeCIError as exc:
        click.echo(f"prime-ci: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


@cli.command()
@click.argument("out_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--out-md", type=click.Path(dir_okay=False, path_type=Path), help="Write the markdown here.")
@click.option("--out-json", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON here.")
@click.option("--json", "json_output", is_flag=True, help="Print the JSON instead of the markdown.")
def report(out_dirs: tuple[Path, ...], out_md: Path | None, out_json: Path | None, json_output: bool) -> int:
    """One summary (markdown + JSON) over the artifacts of several runs, e.g. matrix shards."""
    from prime_ci.artifacts.multireport import aggregate
    from prime_ci.artifacts.report import write_atomic, write_json

    markdown, data = aggregate(list(out_dirs))
    if out_md is not None:
        write_atomic(out_md, markdown)
    if out_json is not None:
        write_json(out_json, data)
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if json_output else markdown.rstrip("\n"))
    return 0
