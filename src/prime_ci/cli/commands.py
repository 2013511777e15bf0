"""Command line: ``run``, ``demo``, ``resume``, ``show``, ``schema``, ``gates``, ``report``, ``export``, the child
entry, and ``main`` (exit codes and one-line errors)."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import click

from prime_ci.cli.actions_stream import guard
from prime_ci.cli.app import cli, echo_json, host_setup, print_outcome, quiet_say, say, say_plain, workflow_command
from prime_ci.cli.operator_config import given
from prime_ci.cli.options import BUILD, GATE, GATES_FILE, JSON, OUT, PASS_ENV, PYTHON, RUN_OPTIONS, SANDBOX, SANDBOX_RO
from prime_ci.cli.params import PanelCommand, PanelOption, options
from prime_ci.cli.status import for_run
from prime_ci.durations import format_duration
from prime_ci.errors import PrimeCIError
from prime_ci.isolation import limits


@cli.command(cls=PanelCommand)
@click.argument("repo", default=".")
@options(RUN_OPTIONS)
@click.pass_context
def run(ctx: click.Context, /, **params: Any) -> int:
    """Clone REPO into a disposable worktree and let the model work there.

    A relative path, on the command line or in a --config file, is relative to the working directory (REPO,
    --task-file, --gates-file, --sandbox-ro, --out, ...); paths in the repository's prime-ci.toml are relative to
    the worktree."""
    from prime_ci.isolation.sandbox import start_trial

    flags = given(ctx, params)
    host_setup()
    start_trial(str(params["sandbox"]))  # the trial sandboxes run while the engine is imported and REPO cloned
    from prime_ci.engine.prepare import prepare
    from prime_ci.engine.run import execute

    tell = quiet_say if params["quiet"] else say_plain
    prep = prepare(flags, tell)  # a litellm route starts importing litellm here, overlapping the kernel start
    tell(f"run {prep.run_id}: {prep.worktree.source} @ {prep.worktree.base_commit[:12]} -> {prep.out}")
    tell(f"limits: {limits.status(prep.cfg.limits)}")
    if prep.worktree.dirty:
        from rich.markup import escape

        from prime_ci.artifacts.report import dirty_note

        say(f"[yellow]warning:[/] {escape(dirty_note(prep.worktree.dirty, prep.worktree.snapshot_of is not None))}")
    return print_outcome(execute(prep, tell, progress=None if params["quiet"] else for_run(), emit=workflow_command),
                         params["json_output"])


@cli.command()
@OUT
@JSON
def demo(out: Path | None, json_output: bool) -> int:
    """Run the bundled demo repository with the bundled replay model (no key, no network)."""
    from prime_ci.demo import demo_flags
    from prime_ci.engine.prepare import prepare
    from prime_ci.engine.run import execute

    host_setup()
    flags, cleanup = demo_flags(out)
    try:
        prep = prepare(flags, say_plain)
        say_plain(f"demo run {prep.run_id}: a failing test, a replayed model that fixes it -> {prep.out}")
        return print_outcome(execute(prep, say_plain, progress=for_run(), emit=workflow_command), json_output)
    finally:
        cleanup()


@cli.command()
@click.argument("session", metavar="SESSION|RUN_DIR", type=click.Path(exists=True, path_type=Path))
def show(session: Path) -> int:
    """Render a session log for a person: a session file, or a run's artifacts directory (its session.jsonl and
    its sub-agents' sessions)."""
    from prime_ci.session.show import render

    if session.is_dir():
        if not (session / "session.jsonl").is_file():
            raise click.UsageError(f"{session}: no session.jsonl in this directory (not a run's artifacts?)")
        session = session / "session.jsonl"
    render(session)
    return 0


@cli.command()
@click.argument("which", default="all",
                type=click.Choice(["result", "session", "gates", "refine", "bench", "suite", "all"]))
def schema(which: str) -> int:
    """Print the JSON Schema of result.json, session entries, gate files, refine plans, bench.json and a bench
    suite's task (a TOML [[task]] table or a JSONL line)."""
    from prime_ci.cli.schema_registry import schemas

    all_schemas = schemas()
    echo_json(json.dumps(all_schemas if which == "all" else all_schemas[which], indent=2))
    return 0


@cli.command(cls=PanelCommand)
@GATE
@GATES_FILE.but(help="TOML [[gate]] file (repeatable).")
@BUILD.but(help="Command run before the gates (repeatable); a failure skips them.")
@click.option("--junit", type=click.Path(path_type=Path), metavar="FILE", cls=PanelOption, panel="Output",
              help="Write a JUnit report here.")
@click.option("--logs", type=click.Path(path_type=Path), default=Path("prime-ci-out/gates"), show_default=True,
              metavar="DIR", cls=PanelOption, panel="Output", help="Where the gates' logs go.")
@SANDBOX.but(help="Isolate the gates (on: fail closed, exit 5).")
@PYTHON.but(help="The project's interpreter (default: ./.venv, else python3 on PATH).")
@SANDBOX_RO
@PASS_ENV.but(help="Let one environment variable reach the gates (repeatable).")
@JSON.but(help="Print the results as JSON.")
def gates(
    gate: tuple[str, ...], gates_file: tuple[str, ...], build: tuple[str, ...], junit: Path | None, logs: Path,
    sandbox: str,
    python: str | None, sandbox_ro: tuple[str, ...], pass_env: tuple[str, ...], json_output: bool,
) -> int:
    """Run gates alone, in the current directory, with the same semantics as in a run: the project's
    interpreter, the scrubbed environment and the sandbox (the current directory writable)."""
    import asyncio

    from prime_ci.engine.environment import Standalone, standalone
    from prime_ci.gates.junit import ended, github_annotations, write_gates_junit
    from prime_ci.gates.runner import gates_from_commands, load_gate_files
    from prime_ci.gates.specs import builds_from_texts, collect_builds

    files = [Path(p) for p in gates_file]
    specs = gates_from_commands(list(gate)) + load_gate_files(files)
    if not specs:
        raise click.UsageError("no gates: give --gate or --gates-file")
    texts = [(str(p), p.read_text(encoding="utf-8")) for p in files]
    options = Standalone(sandbox=sandbox, python=python, sandbox_ro=list(sandbox_ro), pass_env=list(pass_env),
                         builds=collect_builds(list(build), builds_from_texts(texts)))
    results = asyncio.run(standalone(specs, Path.cwd(), logs.resolve(), options, say_plain))
    for r in results:
        state = "pass" if r.passed else "FAIL"
        what = r.name if r.name.startswith("build: ") else f"gate {r.name}"
        say_plain(f"{what}: {state}{' (flaky)' if r.flaky else ''} {ended(r.exit_code, r.timed_out, r.timeout_s)} "
                  f"in {format_duration(r.duration_s)} -> {r.log_path}")
    if junit is not None:
        write_gates_junit(results, junit)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(results, root=Path.cwd()):
            workflow_command(line)
    if json_output:
        echo_json(json.dumps([r.to_dict() for r in results], indent=2, default=str))
    return 0 if all(r.passed for r in results) else 1


@cli.command(hidden=True)
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def child(spec: Path) -> int:
    """Internal: the entry point of an rlm child process."""
    from prime_ci.child import main as child_main

    return child_main(spec)


@cli.command()
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--salvage", is_flag=True, help="Keep the valid records around damage in the middle of the log.")
@JSON
def resume(out_dir: Path, salvage: bool, json_output: bool) -> int:
    """Continue an interrupted run from its artifacts directory (a finished run returns its result)."""
    from prime_ci.engine.prepare import prepare_resume
    from prime_ci.engine.run import execute

    host_setup()
    prepared = prepare_resume(out_dir, salvage=salvage, say=say_plain)
    if isinstance(prepared, dict):
        say_plain(f"run in {out_dir} had already finished")
        return print_outcome({"out_dir": str(out_dir), "wall_s": 0.0, "usage": {"turns": 0, "total_tokens": 0},
                        **prepared}, json_output)
    prep, state = prepared
    say_plain(f"resuming run {prep.run_id} after {len(state.session.entries)} entries -> {prep.out}")
    say_plain(f"limits: {limits.status(prep.cfg.limits)}")
    return print_outcome(execute(prep, say_plain, resume=state, salvage=salvage, progress=for_run(),
                                 emit=workflow_command), json_output)


@cli.command()
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--prime-agent", "dest", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Lay the sessions out as Prime Agent keeps them under this directory (sessions/<id>.jsonl, "
              "session-artifacts/<id>/sub-<8 hex>/).")
def export(out_dir: Path, dest: Path) -> int:
    """Copy a run's session and its sub-agents' sessions into Prime Agent's layout."""
    from prime_ci.children.export import export_prime_agent

    for path in export_prime_agent(out_dir, dest):
        click.echo(str(path))
    return 0


def main() -> None:
    guard()  # in a GitHub Actions log, nothing printed from here on can be a workflow command prime-ci did not write
    # a job that sets PYTHONWARNDEFAULTENCODING (for its tests, at the workflow's level) sets it for this step too: the
    # libraries prime-ci runs on are not the job's to fix, so their warnings stay off the console; prime-ci's own code
    # names its encodings, and would still be shown (tests/test_job_warnings.py)
    warnings.filterwarnings("ignore", category=EncodingWarning)
    warnings.filterwarnings("default", category=EncodingWarning, module=r"prime_ci(\.|$)")
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
    from prime_ci.artifacts.multireport import aggregate, write_report

    markdown, data = aggregate(list(out_dirs))
    write_report(markdown, data, out_md=out_md, out_json=out_json)
    if json_output:
        echo_json(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        click.echo(markdown.rstrip("\n"))
    return 0
