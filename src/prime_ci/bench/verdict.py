"""A task's verdict: the run's own gates (its final round, run by the runner) and the suite's hidden tests,
run by the bench on a fresh checkout of the base with the run's patch and the test patch applied."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from prime_ci.bench.model import HiddenCheck
from prime_ci.bench.suite import DEFAULT_TEST_COMMAND, Task
from prime_ci.durations import format_duration
from prime_ci.engine.environment import Standalone, standalone
from prime_ci.gates.runner import GateResult
from prime_ci.gates.specs import GateSpec
from prime_ci.isolation import durable
from prime_ci.isolation.worktree import GitError, Worktree, create_worktree

HIDDEN_TIMEOUT = 900.0
# pytest's exit codes that say the tests did not run, as opposed to 1: some tests failed
PYTEST_NOT_RUN = {2: "interrupted", 3: "internal error", 4: "usage error: a test id not found?", 5: "no tests ran"}


def gates_passed(result: dict[str, Any]) -> bool | None:
    """The run's gates in their final round (None when the task had none)."""
    gates = result.get("gates") or []
    return all(bool(g.get("passed")) for g in gates) if gates else None


def solved(result: dict[str, Any], hidden: HiddenCheck | None) -> bool:
    """Exit 0 (every gate passed in the final round, nothing protected touched, the patch saved) and the
    hidden tests pass when there are any. A run that ended on a budget is not solved, even with a patch."""
    return int(result.get("exit_code", -1)) == 0 and (hidden is None or hidden.passed)


def python_of(task: Task) -> str | None:
    return None if task.python is None else task.python.replace("{python}", sys.executable)


def test_command(task: Task) -> str:
    ids = shlex.join(task.test_ids())
    command = task.test_command or DEFAULT_TEST_COMMAND
    return command.replace("{tests}", ids).strip()


async def hidden_check(task: Task, source: str, base_commit: str, run_dir: Path, bench_out: Path,
                       options: Standalone) -> HiddenCheck:
    """Base + the run's ``patch.diff`` + the task's test patch, then its test command with the test ids, in
    the same environment and sandbox as gates. A patch that does not apply fails the check (said in its log)."""
    started = time.monotonic()
    log_dir = run_dir / "hidden"
    log_dir.mkdir(parents=True, exist_ok=True)
    command = test_command(task)
    wt = await asyncio.to_thread(create_worktree, source, base_commit)
    try:
        problem = await asyncio.to_thread(_apply_all, wt, run_dir / "patch.diff", task.patch_text())
        if problem is not None:
            durable.write(log_dir / "hidden.log", problem + "\n", sync=False)
            return HiddenCheck(passed=False, command=command, exit_code=None, failing=[],
                               log=os.path.relpath(log_dir / "hidden.log", bench_out),
                               duration_s=round(time.monotonic() - started, 3), error=problem)
        spec = GateSpec(name="hidden", command=command, timeout=HIDDEN_TIMEOUT)
        options = Standalone(sandbox=options.sandbox, python=python_of(task), sandbox_ro=options.sandbox_ro,
                             pass_env=options.pass_env)
        result = (await standalone([spec], wt.path, log_dir, options, lambda _: None))[0]
    finally:
        await asyncio.to_thread(wt.remove)
    rel = os.path.relpath(result.log_path, bench_out)
    return HiddenCheck(passed=result.passed, command=command, exit_code=result.exit_code,
                       failing=[f.test for f in result.failures], log=rel,
                       duration_s=round(time.monotonic() - started, 3), error=_not_run(command, result, rel))


def _not_run(command: str, result: GateResult, log: str) -> str | None:
    """Why the hidden tests could not judge the patch, when pytest says it ran none (or is not there)."""
    if result.passed or "pytest" not in command:
        return None
    if "No module named pytest" in result.output:
        return f"the hidden tests could not run: no pytest in the task's interpreter (see {log}; set python)"
    if result.exit_code in PYTEST_NOT_RUN:
        return f"the hidden tests could not run: pytest exit {result.exit_code}, {PYTEST_NOT_RUN[result.exit_code]} " \
               f"(see {log})"
    if result.timed_out:
        return f"the hidden tests timed out after {format_duration(HIDDEN_TIMEOUT)} (see {log})"
    return None


def _apply_all(wt: Worktree, run_patch: Path, test_patch: str | None) -> str | None:
    """Apply the run's patch, then the test patch; the first that fails, said in a line."""
    patches = [("the run's patch", run_patch.read_bytes() if run_patch.is_file() else b"")]
    if test_patch:
        patches.append(("the test patch", test_patch.encode()))
    for what, data in patches:
        if not data.strip():
            continue
        try:
            wt.git(["apply", "--whitespace=nowarn", "--binary", "-"], input=data)
        except GitError as exc:
            return f"prime-ci bench: {what} does not apply to the base commit: {exc}"
    return None
