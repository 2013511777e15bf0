"""A run's view of the project's environment: the variables for the kernel and gates, the setup phase, the
system prompt's note on both."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.durations import format_duration
from prime_ci.engine import toolchains
from prime_ci.engine.prepare import Prepared
from prime_ci.engine.setup import SetupOutcome, SetupSpec, failure_hint, last_lines, run_all
from prime_ci.engine.toolchains import Toolchain
from prime_ci.gates import builds
from prime_ci.gates.builds import BuildOutcome
from prime_ci.gates.judge import Judge
from prime_ci.gates.runner import GateResult, GateSpec, run_gate, run_gates
from prime_ci.gates.specs import BuildSpec
from prime_ci.isolation import home_tools, hostuid, projenv
from prime_ci.isolation import limits as limits_mod
from prime_ci.isolation import sandbox as sandbox_mod
from prime_ci.isolation.paths import inside_any
from prime_ci.isolation.project_layer import swap
from prime_ci.isolation.sandbox import scrubbed_env
from prime_ci.isolation.worktree import is_url


def project_vars(prep: Prepared, extra: dict[str, str], *, skills: bool = True) -> dict[str, str]:
    """PATH with the project's environment first, PYTHONPATH pointed at the worktree where it pointed at REPO
    (after the harness's skill directories, for the kernel only), the kernel's view of the project's packages;
    plus ``extra``."""
    wt, project = prep.worktree, prep.project
    out = project.env(os.environ.get("PATH", os.defpath))
    own = prep.harness.pythonpath() if skills else []
    pythonpath = [*own, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    if not is_url(wt.source):
        pythonpath = [swap(p, wt.source.rstrip("/"), str(wt.path)) for p in pythonpath]
    if pythonpath:
        out["PYTHONPATH"] = os.pathsep.join(pythonpath)
    if site := project.kernel_site():
        out["PRIME_CI_PROJECT_SITE"] = site
    return {**out, **extra}


def _commands(prep: Prepared) -> list[str]:
    """The run's setup, gate and build command lines (which toolchains the run drives: ``toolchains.named``)."""
    return [*(s.command for s in prep.setup), *(g.command for g in prep.gates), *(b.command for b in prep.builds)]


def toolchain_vars(prep: Prepared, env: dict[str, str]) -> dict[str, str]:
    """``env`` without what the worktree's toolchains must not see (``toolchains.unset_env``), and for a run that
    drives uv, the project's Python as ``UV_PYTHON`` unless the job passed its own: in the sandbox the job's
    interpreter may lie under the hidden home (pyenv, uv's own Pythons), and uv would quietly make the project's
    environment from another Python on PATH (/usr/bin/python3), so a CI matrix would test the wrong version."""
    found = toolchains.recognise(prep.worktree.path)
    drop = toolchains.unset_env(found)
    out = {k: v for k, v in env.items() if k not in drop}
    if "UV_PYTHON" not in out and any(t.name == "uv" for t in toolchains.named(found, _commands(prep))):
        out["UV_PYTHON"] = prep.project.interp.base
    return out


def gate_vars(prep: Prepared, env: dict[str, str]) -> dict[str, str]:
    """The gates' (and setup's) environment from the kernel's: no bridge, no skill directories on PYTHONPATH, and
    bytecode only from a cache outside the worktree (a forged __pycache__/*.pyc with the source's mtime and size
    cannot stand in for the source the patch shows)."""
    out = {k: v for k, v in env.items() if k not in ("PRIME_CI_BRIDGE", "PYTHONPATH")}
    if pythonpath := project_vars(prep, {}, skills=False).get("PYTHONPATH"):
        out["PYTHONPATH"] = pythonpath
    return out | {"PYTHONPYCACHEPREFIX": str(prep.worktree.root / "gate-pycache")}


async def run_setup(prep: Prepared, env: dict[str, str], say: Callable[[str], None],
                    on_done: Callable[[SetupOutcome, str], None] | None = None
                    ) -> tuple[list[SetupOutcome], str | None]:
    """Each setup command through the gate runner: scrubbed env, own process group, log in OUT/setup/; under
    the sandbox the run's environment directory is writable and the network is on unless the spec says not (never
    for the repository's own setup).
    A command with network also gets the job's network settings (CA bundles, proxies, indexes), the files they
    name readable in the sandbox. A failure's last lines are said, with a hint (also returned). ``on_done`` gets
    each outcome with the command's output."""
    log_dir = prep.out / "setup"
    sandbox = prep.sandbox
    network = sandbox_mod.network_env()
    hint: list[str | None] = [None]

    async def one(spec: SetupSpec) -> SetupOutcome:
        launcher: list[str] = []
        if sandbox is not None:
            readonly = sandbox.readonly + (sandbox_mod.network_files(network) if spec.network else [])
            launcher = dataclasses.replace(sandbox, writable=[*sandbox.writable, str(prep.project.root)],
                                           readonly=readonly, network=spec.network).wrap([])
        # the gates' variables (--pass-env included) win over the job's network settings
        own_env = {**network, **env} if spec.network else env
        result = await run_gate(spec.as_gate(), cwd=prep.worktree.path, env=own_env, log_dir=log_dir,
                                launcher=launcher, limits=prep.cfg.limits, kind="setup")
        if not result.passed:
            tail = last_lines(result.output)
            say(f"setup {spec.name}: last {len(tail)} line(s) of its output:")
            for line in tail:
                say(f"  | {line}")
            hint[0] = failure_hint(result.output, offline_repository=spec.repository and sandbox is not None)
            if hint[0]:
                say(f"setup {spec.name}: hint: {hint[0]}")
        outcome = SetupOutcome(name=spec.name, command=spec.command, passed=result.passed,
                               exit_code=result.exit_code, timed_out=result.timed_out,
                               duration_s=round(result.duration_s, 3), timeout_s=spec.timeout,
                               log=str(Path("setup") / result.log_path.name))
        if on_done is not None:
            on_done(outcome, result.output)
        return outcome

    before = set(prep.worktree.untracked())
    outcomes = await run_all(prep.setup, one, say)
    if outcomes and outcomes[-1].passed:
        # what setup made (egg-info, node_modules, build dirs) is preparation, not part of the patch
        created = [p for p in prep.worktree.untracked() if p not in before]
        if created:
            prep.worktree.ignore(created)
            say(f"setup created {len(created)} untracked path(s), left out of the diff: {', '.join(created[:5])}")
    return outcomes, hint[0]


def adopt_toolchain(prep: Prepared, judge: Judge, kernel_env: dict[str, str]) -> tuple[Toolchain, Path] | None:
    """After setup: the recognised toolchains' offline switches for the gates and the kernel, and the environment
    their setup made as the one the run's environment is layered on (unless ``--python`` named one). The gates'
    and builds' sandbox then shows that environment's interpreter too."""
    found = toolchains.recognise(prep.worktree.path)
    offline = toolchains.offline_env(found) | toolchains.find_links(prep.project.root / toolchains.WHEELHOUSE)
    sandboxed = prep.sandbox is not None
    used = toolchains.named(found, _commands(prep))
    prep.tools_note = toolchains.prompt_note(used, None, sandboxed=sandboxed)
    judge.env.update(offline)  # the builds share the gates' environment
    kernel_env.update(offline)
    made = next(((t, env) for t in found if (env := t.environment(prep.worktree.path, prep.worktree.root / "home"))),
                None)
    if made is None or prep.cfg.python is not None:
        return None
    interp = projenv.probe_made(made[1])
    prep.project = projenv.relayer(prep.project, interp)
    if made[0].warns_active and "VIRTUAL_ENV" in judge.env:
        # `uv run` said atop every round's feedback that the run environment's VIRTUAL_ENV is not its .venv and is
        # ignored: the run environment is layered on that .venv, which is the one to name
        judge.env["VIRTUAL_ENV"] = kernel_env["VIRTUAL_ENV"] = str(made[1])
    used = [t for t in found if t in used or t is made[0]]  # setup behind a script made it: it is used
    prep.tools_note = toolchains.prompt_note(used, made, sandboxed=sandboxed)
    if (sandbox := prep.sandbox) is not None:
        # the kernel's cells see the environment read-only; the gates and builds run the tool, which writes in the
        # environment it made (tox's logs, the package reinstalled each round by tox and `nox -r`, uv's sync),
        # so where it lies in a directory the sandbox writes (the worktree, the scratch home) it stays writable
        dirs = interp.dirs()
        own = [d for d in dirs if not inside_any(sandbox.writable, d, resolve=True)]
        gates = dataclasses.replace(sandbox, readonly=[*sandbox.readonly, *own])
        sandbox.readonly = [*sandbox.readonly, *dirs]
        judge.launcher = gates.wrap([])
        if judge.builds is not None:
            judge.builds.launcher = dataclasses.replace(gates, writable=[*gates.writable, str(prep.project.root)],
                                                        network=False).wrap([])
    return made


def hand_over(prep: Prepared) -> None:
    """As root, give the sandbox's unprivileged uid what it writes: the worktree, its scratch home, the kernel's
    directory and the run's environment; it may pass through the worktree's root to them, and no one else may.
    The host stays root: it reads all of it and writes the artifacts."""
    sandbox, wt = prep.sandbox, prep.worktree
    if sandbox is None or sandbox.uid is None:
        return
    hostuid.let_in(sandbox.uid, wt.root)
    sandbox.give(wt.path, *_scratch(prep), tree=True)


def open_sandbox(prep: Prepared, bridge_dir: Path) -> None:
    """The run's sandbox, when it has one: writable the worktree, its scratch home, the kernel's directory and
    the root bridge's; read-only the git data, the harness and what ``--sandbox-ro`` reaches; then handed over."""
    sandbox, wt, harness = prep.sandbox, prep.worktree, prep.harness
    if sandbox is None:
        return
    for d in ("kernel", "child-runs"):
        (wt.root / d).mkdir(exist_ok=True)
    sandbox.writable = [str(p) for p in (wt.path, wt.root / "home", wt.root / "kernel", bridge_dir)]
    sandbox.readonly = [str(wt.git_dir), *harness.pythonpath(), *prep.reach]
    sandbox.tools = home_tools.hidden_tools([*(g.command for g in prep.gates), *(s.command for s in prep.setup),
                                             *(b.command for b in prep.builds)])
    if harness.store is not None:
        sandbox.readonly.append(str(harness.store.root))
    hand_over(prep)


def take_back(prep: Prepared) -> None:
    """The kept worktree (``--keep-worktree``) is the operator's again, as it was before ``hand_over``."""
    sandbox, wt = prep.sandbox, prep.worktree
    if sandbox is None or sandbox.uid is None:
        return
    hostuid.give(os.geteuid(), [wt.path, *_scratch(prep)], tree=True, gid=os.getegid())
    os.chown(wt.root, -1, os.getegid())
    os.chmod(wt.root, 0o700)


def _scratch(prep: Prepared) -> list[Path]:
    return [prep.worktree.root / "home", prep.worktree.root / "kernel", prep.project.root]


def environment_section(prep: Prepared, setup: list[SetupOutcome], built: list[BuildOutcome] | None = None) -> str:
    """What the model is told about the project's environment."""
    lines = ["", "", "## The project's environment", "", prep.project.describe(), *prep.tools_note]
    if setup:
        lines.append("Setup commands already ran in the worktree before your first turn (do not repeat them "
                     "unless the dependencies change):")
        lines += [f"- `{o.command.strip()}` ({'ok' if o.passed else 'failed'})" for o in setup]
    lines += builds.prompt_note(prep.builds, built or [])
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
    builds: list[BuildSpec] = field(default_factory=list)  # run first, logs beside the gates' in build/


async def standalone(specs: list[GateSpec], cwd: Path, log_dir: Path, options: Standalone,
                     say: Callable[[str], None]) -> list[GateResult]:
    """``prime-ci gates``: the gates in CWD with the project's interpreter (a throwaway environment layered on
    it), the scrubbed environment, and the sandbox as ``--sandbox`` says (CWD writable, like a worktree). The
    builds run first (the environment writable too); a failed one is the only result, named ``build: NAME``."""
    # CWD is the operator's own checkout, not a disposable worktree: never given away, so as root the sandbox
    # keeps root's uid on the host here
    sandbox, status, warning = sandbox_mod.resolve(options.sandbox, writable=[], readonly=[], drop=False)
    if warning:
        say(f"warning: {warning}")
    say(f"sandbox: {status}")
    with tempfile.TemporaryDirectory(prefix="prime-ci-gates-") as tmp:
        root = Path(tmp)
        project = projenv.create(root / "env", projenv.probe(projenv.find_python(options.python, cwd)), None)
        env = scrubbed_env(root / "home", options.pass_env, project.env(os.environ.get("PATH", os.defpath)))
        launcher: list[str] = []
        build_launcher: list[str] = []
        if sandbox is not None:
            reach = [str((cwd / p).resolve()) for p in options.sandbox_ro]
            if runner_temp := os.environ.get("RUNNER_TEMP"):
                reach.append(runner_temp)
            sandbox.writable = [str(cwd), str(root / "home"), str(log_dir)]
            commands = [s.command for s in specs] + [b.command for b in options.builds]
            sandbox.readonly = [*reach, *sandbox_mod.named_paths(commands), *project.readable()]
            sandbox.tools = home_tools.hidden_tools(commands)
            launcher = sandbox.wrap([])
            build_launcher = dataclasses.replace(sandbox, writable=[*sandbox.writable, str(project.root)]).wrap([])
        for build in options.builds:
            result = await run_gate(build.as_gate(), cwd=cwd, env=env, log_dir=log_dir.parent / "build",
                                    launcher=build_launcher, limits=options.limits)
            say(f"build {build.name}: {'ok' if result.passed else 'FAILED'} (exit {result.exit_code}) in "
                f"{format_duration(result.duration_s)} -> {result.log_path}")
            if not result.passed:
                return [dataclasses.replace(result, name=f"build: {build.name}")]
        return await run_gates(specs, cwd=cwd, env=env, log_dir=log_dir, launcher=launcher, limits=options.limits)


def session_cwd(source: str) -> str:
    """The session header's ``cwd``: the repository the run was made for (the worktree is gone after it), or
    the invocation directory for a URL."""
    return os.getcwd() if is_url(source) else source
