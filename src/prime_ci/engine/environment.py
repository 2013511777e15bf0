"""A run's view of the project's environment: the variables for the kernel and gates, the setup phase, the
system prompt's note on both."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.engine.prepare import Prepared
from prime_ci.engine.setup import SetupOutcome, SetupSpec, run_all
from prime_ci.gates.runner import GateResult, GateSpec, run_gate, run_gates
from prime_ci.isolation import limits as limits_mod
from prime_ci.isolation import projenv
from prime_ci.isolation import sandbox as sandbox_mod
from prime_ci.isolation.project_layer import swap
from prime_ci.isolation.sandbox import scrubbed_env
from prime_ci.isolation.worktree import is_url


def project_vars(prep: Prepared, extra: dict[str, str]) -> dict[str, str]:
    """PATH with the project's environment first, PYTHONPATH pointed at the worktree where it pointed at REPO,
    the kernel's view of the project's packages; plus ``extra``."""
    wt, project = prep.worktree, prep.project
    out = project.env(os.environ.get("PATH", os.defpath))
    pythonpath = [*prep.harness.pythonpath(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    if not is_url(wt.source):
        pythonpath = [swap(p, wt.source.rstrip("/"), str(wt.path)) for p in pythonpath]
    if pythonpath:
        out["PYTHONPATH"] = os.pathsep.join(pythonpath)
    if site := project.kernel_site():
        out["PRIME_CI_PROJECT_SITE"] = site
    return {**out, **extra}


async def run_setup(prep: Prepared, env: dict[str, str], say: Callable[[str], None]) -> list[SetupOutcome]:
    """Each setup command through the gate runner: scrubbed env, own process group, log in OUT/setup/; under
    the sandbox the run's environment directory is writable and the network is on unless the spec says not."""
    log_dir = prep.out / "setup"
    sandbox = prep.sandbox

    async def one(spec: SetupSpec) -> SetupOutcome:
        launcher: list[str] = []
        if sandbox is not None:
            launcher = dataclasses.replace(sandbox, writable=[*sandbox.writable, str(prep.project.root)],
                                           network=spec.network).wrap([])
        result = await run_gate(spec.as_gate(), cwd=prep.worktree.path, env=env, log_dir=log_dir, launcher=launcher,
                                limits=prep.cfg.limits)
        return SetupOutcome(name=spec.name, command=spec.command, passed=result.passed, exit_code=result.exit_code,
                            timed_out=result.timed_out, duration_s=round(result.duration_s, 3), timeout_s=spec.timeout,
                            log=str(Path("setup") / result.log_path.name))

    before = set(prep.worktree.untracked())
    outcomes = await run_all(prep.setup, one, say)
    if outcomes and outcomes[-1].passed:
        # what setup made (egg-info, node_modules, build dirs) is preparation, not part of the patch
        created = [p for p in prep.worktree.untracked() if p not in before]
        if created:
            prep.worktree.ignore(created)
            say(f"setup created {len(created)} untracked path(s), left out of the diff: {', '.join(created[:5])}")
    return outcomes


def environment_section(prep: Prepared, setup: list[SetupOutcome]) -> str:
    """What the model is told about the project's environment."""
    lines = ["", "", "## The project's environment", "", prep.project.describe()]
    if setup:
        lines.append("Setup commands already ran in the worktree before your first turn (do not repeat them "
                     "unless the dependencies change):")
        lines += [f"- `{o.command.strip()}` ({'ok' if o.passed else 'failed'})" for o in setup]
    if prep.sandbox is not None:
        lines.append("Your cells and the gates run in a sandbox without network: install nothing from the "
                     "internet; the project's dependencies are already installed.")
    return "\n".join(lines) + "\n"


@dataclass
class Standalone:
    """``prime-ci gates`` options: the same environment and sandbox rules as a run's gates."""

    sandbox: str = "auto"
    python: str | None = None
    sandbox_ro: list[str] = field(default_factory=list)
    pass_env: list[str] = field(default_factory=list)
    limits: limits_mod.Limits = field(default_factory=lambda: limits_mod.resolve(None))  # PRIME_CI_LIMITS|defaults


async def standalone(specs: list[GateSpec], cwd: Path, log_dir: Path, options: Standalone,
                     say: Callable[[str], None]) -> list[GateResult]:
    """``prime-ci gates``: the gates in CWD with the project's interpreter (a throwaway environment layered on
    it), the scrubbed environment, and the sandbox as ``--sandbox`` says (CWD writable, like a worktree)."""
    sandbox, status, warning = sandbox_mod.resolve(options.sandbox, writable=[], readonly=[])
    if warning:
        say(f"warning: {warning}")
    say(f"sandbox: {status}")
    with tempfile.TemporaryDirectory(prefix="prime-ci-gates-") as tmp:
        root = Path(tmp)
        project = projenv.create(root / "env", projenv.probe(projenv.find_python(options.python, cwd)), None)
        env = scrubbed_env(root / "home", options.pass_env, project.env(os.environ.get("PATH", os.defpath)))
        launcher: list[str] = []
        if sandbox is not None:
            reach = [str((cwd / p).resolve()) for p in options.sandbox_ro]
            if runner_temp := os.environ.get("RUNNER_TEMP"):
                reach.append(runner_temp)
            sandbox.writable = [str(cwd), str(root / "home"), str(log_dir)]
            sandbox.readonly = [*reach, *sandbox_mod.named_paths(s.command for s in specs), *project.readable()]
            launcher = sandbox.wrap([])
        return await run_gates(specs, cwd=cwd, env=env, log_dir=log_dir, launcher=launcher, limits=options.limits)
