"""Every option of ``prime-ci run``, and the ones other commands share with it, declared once.

An option that is a run setting takes its default from the run configuration model (``FROM_RUN_CONFIG``); the
help shows it from there. Adding a run option is one entry in ``RUN_OPTIONS`` (and its field in ``RunConfig``);
it can then be set in a ``--config`` file too, under its long name.
"""

from __future__ import annotations

from pathlib import Path

import click

from prime_ci.cli.operator_config import load_config
from prime_ci.cli.params import DURATION, FROM_RUN_CONFIG, HTTP_URL, Opt

POS = click.IntRange(min=1)
NONNEG = click.IntRange(min=0)
PATH = click.Path(path_type=Path)
RUN = FROM_RUN_CONFIG

# shared by several commands (`.but(help=...)` where one says it in its own words)
MODEL = Opt("--model", metavar="ID", envvar="PRIME_CI_MODEL", show_envvar=True, default=RUN, panel="Model",
            help="litellm model id, or replay:SESSION.jsonl.")
API_BASE = Opt("--api-base", type=HTTP_URL, metavar="URL", envvar="PRIME_CI_API_BASE", show_envvar=True, default=RUN,
               panel="Model", help="Provider base URL (http:// or https://).")
GATE = Opt("--gate", multiple=True, metavar="CMD", default=RUN, panel="Gates",
           help="Shell command that must exit 0 (repeatable).")
GATES_FILE = Opt("--gates-file", multiple=True, metavar="PATH", default=RUN, panel="Gates",
                 help="TOML file of [[gate]] tables (repeatable; with --gates-from, read from REPO at that commit).")
BUILD = Opt("--build", multiple=True, metavar="CMD", default=RUN, panel="Gates",
            help="Trusted command run before every gate round, e.g. 'python setup.py build_ext --inplace' "
            "(repeatable; sandboxed, no network, the run's environment writable).")
SANDBOX = Opt("--sandbox", type=click.Choice(["auto", "on", "off"]), default=RUN, panel="Environment",
              help="Isolate the kernel, gates and children (on: fail closed, exit 5).")
SANDBOX_RO = Opt("--sandbox-ro", multiple=True, metavar="PATH", default=RUN, panel="Environment",
                 help="Extra path visible read-only in the sandbox (repeatable).")
PASS_ENV = Opt("--pass-env", multiple=True, metavar="NAME", default=RUN, panel="Environment",
               help="Let one environment variable reach the kernel and gates (repeatable).")
PYTHON = Opt("--python", metavar="PATH", default=RUN, panel="Environment",
             help="The project's interpreter for gates, setup and shell commands (default: REPO's .venv, else "
             "python3 on PATH).")
OUT = Opt("--out", type=PATH, metavar="DIR", default=RUN, panel="Output",
          help="Artifacts directory (default: prime-ci-out/RUN_ID).")
JSON = Opt("--json", "json_output", is_flag=True, default=RUN, panel="Output",
           help="Print result.json on stdout at the end.")
VERBOSE = Opt("-v", "--verbose", is_flag=True, default=RUN, panel="Output",
              help="Show each cell's code, the head of its output and the model's text (bounded, redacted).")
QUIET = Opt("-q", "--quiet", is_flag=True, default=RUN, panel="Output", help="Print the verdict (and warnings) only.")
CONFIG = Opt("--config", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
             envvar="PRIME_CI_CONFIG", show_envvar=True, is_eager=True, expose_value=False, callback=load_config,
             help="Operator settings: a TOML file whose keys are the long option names (max-turns = 30, gate = "
             "[...]); flags and environment variables win over it, it wins over the repository's prime-ci.toml.")

RUN_OPTIONS = [
    # Task
    Opt("--ref", metavar="REF", default=RUN, panel="Task", help="Commit or branch to start from (default: REPO's "
        "HEAD)."),
    Opt("--task", default=RUN, panel="Task", help="The instruction."),
    Opt("--task-file", type=PATH, default=RUN, panel="Task", help="Read the instruction from a file."),
    Opt("--untrusted-file", type=PATH, default=RUN, panel="Task", help="PR/issue text, fenced as data."),
    Opt("--from-session", type=PATH, default=RUN, panel="Task", help="Continue the conversation of this Prime Agent "
        "(or prime-ci) session file: its active branch, after its last compaction (--task then optional)."),
    Opt("--include-dirty", is_flag=True, default=RUN, panel="Task", help="Start from a snapshot of REPO's "
        "uncommitted working tree."),
    # Model
    MODEL,
    API_BASE,
    Opt("--model-timeout", type=DURATION, default=RUN, panel="Model", help="One model call attempt without an "
        "answer (then retried)."),
    Opt("--context-window", type=click.IntRange(min=1000), metavar="N", default=RUN, panel="Model",
        help="Compact near this many tokens (default: the model's window from litellm, else 128000)."),
    Opt("--max-completion-tokens", type=click.IntRange(min=16), metavar="N", default=RUN, panel="Model",
        help="Completion tokens per call (default: the model's output limit in litellm's table, else 8192)."),
    Opt("--cache/--no-cache", default=RUN, panel="Model", help="Prompt-cache breakpoints where the provider "
        "takes them."),
    Opt("--reasoning-effort", type=click.Choice(["low", "medium", "high"]), default=RUN, panel="Model",
        help="Passed to the provider in its own form."),
    Opt("--price-per-mtok", metavar="IN,OUT[,CACHED]", default=RUN, panel="Model", help="USD per million "
        "tokens, for a model litellm does not price (needed by --max-cost then)."),
    Opt("--seed", type=int, metavar="N", default=RUN, panel="Model", help="Sampling seed passed to providers "
        "that take one (recorded in result.json)."),
    # Budgets (the action's `budgets` input takes exactly these)
    Opt("--max-turns", type=POS, metavar="N", default=RUN, panel="Budgets", help="Root model calls."),
    Opt("--max-tokens", type=POS, metavar="N", default=RUN, panel="Budgets", help="Tokens, children included."),
    Opt("--max-wall", type=DURATION, default=RUN, panel="Budgets", help="Wall clock for the whole run."),
    Opt("--max-cost", type=click.FloatRange(min=0, min_open=True), metavar="USD", default=RUN, panel="Budgets",
        help="Spend cap in USD."),
    Opt("--cell-timeout", type=DURATION, default=RUN, panel="Budgets", help="One kernel cell."),
    Opt("--max-gate-retries", type=NONNEG, metavar="N", default=RUN, panel="Budgets", help="Failed rounds fed "
        "back."),
    Opt("--max-depth", type=NONNEG, metavar="N", default=RUN, panel="Budgets", help="rlm depth."),
    Opt("--max-children", type=POS, metavar="N", default=RUN, panel="Budgets", help="rlm children alive at once."),
    # Gates
    GATE,
    GATES_FILE,
    Opt("--gates-from", metavar="REF", default=RUN, panel="Gates", help="Read gate files from this commit "
        "instead of the worktree."),
    Opt("--gate-timeout", type=DURATION, default=RUN, panel="Gates", help="Each gate's timeout unless its "
        "[[gate]] table sets one (default 10m)."),
    BUILD,
    Opt("--require-changes", is_flag=True, default=RUN, panel="Gates", help="An empty diff is a failure (exit "
        "8)."),
    Opt("--allow-protected", multiple=True, metavar="GLOB", default=RUN, panel="Gates", help="Glob of protected "
        "paths the run may change (repeatable)."),
    # Environment
    SANDBOX,
    SANDBOX_RO,
    PASS_ENV,
    PYTHON,
    Opt("--setup", multiple=True, metavar="CMD", default=RUN, panel="Environment", help="Trusted command "
        "preparing the worktree before the first model call (repeatable; network on, even in the sandbox)."),
    Opt("--limits", metavar="SPEC", envvar="PRIME_CI_LIMITS", show_envvar=True, panel="Environment",
        help="Limits on every kernel, gate and setup command, e.g. 'pids=4096,memory=8GiB,file_size=2GiB,"
        "cpu=600' (default: pids=2048,memory=4GiB,file_size=1GiB)."),
    # Harness
    Opt("--harness", type=PATH, metavar="DIR", default=RUN, panel="Harness", help="Harness state directory."),
    Opt("--harness-branch", metavar="BRANCH", default=RUN, panel="Harness", help="Load/commit harness state on "
        "this branch of REPO."),
    Opt("--propose", is_flag=True, default=RUN, panel="Harness", help="Commit harness changes to a proposals "
        "branch."),
    Opt("--push", is_flag=True, default=RUN, panel="Harness", help="Push what was committed to origin."),
    Opt("--refine", is_flag=True, default=RUN, panel="Harness", help="Run one refinement at the end."),
    # Output
    OUT,
    Opt("--keep-worktree", is_flag=True, default=RUN, panel="Output", help="Keep the worktree."),
    JSON,
    VERBOSE,
    QUIET,
    CONFIG,
]
