"""Everything validated before a run starts (or resumes): a ConfigError here means exit 2, nothing touched."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prime_ci.engine import repo_values
from prime_ci.engine import setup as setup_phase
from prime_ci.engine.config import RunConfig, build_config, file_settings
from prime_ci.engine.from_session import Origin, load_origin
from prime_ci.engine.resume import ResumeState, plan
from prime_ci.engine.setup import SetupSpec
from prime_ci.engine.toolchains import WHEELHOUSE, build_requires_step, bytecode_step, wheelhouse_step
from prime_ci.errors import ConfigError
from prime_ci.gates.runner import GateSpec, gates_from_commands, load_gate_files, load_gate_files_from_ref
from prime_ci.gates.specs import BuildSpec, builds_from_texts, collect_builds
from prime_ci.harness.in_run import HarnessRun
from prime_ci.isolation import limits, projenv
from prime_ci.isolation import sandbox as sandbox_mod
from prime_ci.isolation.paths import inside, inside_any
from prime_ci.isolation.projenv import ProjectEnv
from prime_ci.isolation.sandbox import Sandbox
from prime_ci.isolation.worktree import Worktree, create_worktree, is_url, resolve_ref
from prime_ci.model.credentials import model_problem
from prime_ci.model.protocol import Model
from prime_ci.model.routes import make_model, model_options
from prime_ci.session.log import entry_id


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + entry_id()[:6]


@dataclass
class Prepared:
    """Everything validated before anything runs; a ConfigError before this point means exit 2."""

    cfg: RunConfig
    worktree: Worktree
    gates: list[GateSpec]
    model: Model
    out: Path
    run_id: str
    harness: HarnessRun
    project: ProjectEnv
    setup: list[SetupSpec]
    sandbox: Sandbox | None = None
    sandbox_status: str = "off"
    reach: list[str] = field(default_factory=list)  # extra read-only paths in the sandbox
    builds: list[BuildSpec] = field(default_factory=list)
    origin: Origin | None = None  # --from-session: the conversation the run goes on with
    tools_note: list[str] = field(default_factory=list)  # the system prompt's lines on the project's own tools


def prepare(flags: dict[str, Any], say: Callable[[str], None]) -> Prepared:
    """Check the flags, clone, read repo settings, validate everything. Raises ConfigError (exit 2) with nothing
    left behind: what the flags alone decide (the limits, the model's provider and key) before the clone."""
    spec = flags.get("limits")
    flags = {**flags, "limits": limits.resolve(None if spec is None else str(spec))}
    model, api_base = flags.get("model"), flags.get("api_base")
    if model and (missing := model_problem(str(model), str(api_base or "") or None)):
        raise ConfigError(missing)
    run_id = new_run_id()
    mode = str(flags.get("sandbox") or RunConfig.model_fields["sandbox"].default)
    sandbox_mod.start_trial(mode)  # unless the CLI began it: the trial sandboxes run while the repository is cloned
    worktree = create_worktree(str(flags.get("repo", ".")), flags.get("ref"),
                               include_dirty=bool(flags.get("include_dirty")))
    try:
        flags = operator_paths(flags, worktree.source)
        warn = repo_values.warner(say)
        from_repo = file_settings(worktree.path, warn)
        repo_keys = set(from_repo) - set(flags)
        cfg = repo_values.admit(build_config(flags, from_repo, warn), worktree, repo_keys, warn)
        origin = load_origin(cfg.from_session) if cfg.from_session is not None else None
        gates = load_gates(cfg, worktree)
        setup = load_setup(cfg, worktree, repository_setup="setup" in repo_keys, warn=warn)
        builds = collect_builds(cfg.build, builds_from_texts(gate_texts(cfg, worktree)))
        if builds and (step := build_requires_step(worktree.path, warn)) and step.name not in {s.name for s in setup}:
            setup = [step, *setup]
        project = project_env(cfg, worktree)
        for step in (wheelhouse_step(worktree.path, project.root / WHEELHOUSE, setup, warn),
                     bytecode_step(worktree.path, worktree.root, setup)):
            if step is not None and step.name not in {s.name for s in setup}:
                setup = [*setup, step]
        model = make_model(cfg.model or "", api_base=cfg.api_base, options=model_options(cfg))
        out = (cfg.out or Path("prime-ci-out") / run_id).resolve()
        if (out / "session.jsonl").exists():
            raise ConfigError(f"--out: {out} already holds a run (use `prime-ci resume {out}`)")
        harness = HarnessRun.load(harness=cfg.harness, branch=cfg.harness_branch, propose=cfg.propose, wt=worktree,
                                  run_id=run_id, untrusted=cfg.untrusted_file is not None)
        sandbox, status, warning = sandbox_mod.trial(cfg.sandbox)  # the mode is the operator's: cfg.sandbox == mode
        if warning:
            say(f"warning: {warning}")
    except BaseException:
        worktree.remove()
        raise
    worktree.excludes = [".prime-ci"]
    _report_dir(worktree)
    commands = [g.command for g in gates] + [s.command for s in setup] + [b.command for b in builds]
    reach = reach_paths(cfg, worktree, commands, project)
    reach += reuse_node_modules(worktree)
    return Prepared(cfg, worktree, gates, model, out, run_id, harness, project, setup, sandbox, status, reach,
                    builds=builds, origin=origin)


def operator_paths(flags: dict[str, Any], source: str) -> dict[str, Any]:
    """The operator's relative ``--gates-file`` and ``--sandbox-ro`` paths made absolute from the working directory,
    as every other path on the command line or in ``--config`` is read (DESIGN §14); the repository's own values
    stay relative to the worktree. Read at ``--gates-from``, a gate file is a path in REPO at that commit: one
    relative to the working directory must lie in a local REPO, and is taken relative to its top."""
    out = dict(flags)  # a key the operator did not give stays out: the repository's value may apply
    if "sandbox_ro" in out:
        out["sandbox_ro"] = [os.path.abspath(p) for p in out["sandbox_ro"]]
    if "gates_file" in out and not out.get("gates_from"):
        out["gates_file"] = [os.path.abspath(p) for p in out["gates_file"]]
    elif "gates_file" in out and not is_url(source):
        out["gates_file"] = [_in_repo(source, p) for p in out["gates_file"]]
    return out


def _in_repo(source: str, name: str) -> str:
    path = Path(name).absolute()
    if not inside(source, path, resolve=True):
        raise ConfigError(f"--gates-file: {name} is not in REPO ({source}), and with --gates-from gate files are "
                          "read from REPO at that commit")
    return path.resolve().relative_to(Path(source).resolve()).as_posix()


def _report_dir(wt: Worktree) -> None:
    """``.prime-ci/`` in the worktree (left out of the diff and fingerprint): where presets write reports."""
    target = wt.path / ".prime-ci"
    if not target.is_symlink() and not target.exists():
        target.mkdir()


def reuse_node_modules(wt: Worktree) -> list[str]:
    """REPO's installed ``node_modules`` (a job's `npm ci`), linked into a worktree that has none: the clone
    cannot install without network in the sandbox. Left out of the diff; visible read-only in the sandbox."""
    if is_url(wt.source):
        return []
    installed, link = Path(wt.source) / "node_modules", wt.path / "node_modules"
    if not (wt.path / "package.json").is_file() or not installed.is_dir() or link.exists() or link.is_symlink():
        return []
    real = installed.resolve()
    link.symlink_to(real, target_is_directory=True)
    wt.ignore(["node_modules"])
    # `file:` and workspace dependencies are symlinks to elsewhere in REPO: those targets must be visible too
    entries = [e for e in real.iterdir() if not e.name.startswith("@")]
    entries += [e for scope in real.glob("@*") if scope.is_dir() for e in scope.iterdir()]
    targets = {str(e.resolve()) for e in entries if e.is_symlink() and e.exists()}
    return [str(real), *sorted(t for t in targets if not inside(real, t, resolve=False))]


def project_env(cfg: RunConfig, wt: Worktree) -> ProjectEnv:
    """The project's interpreter, and the run's environment layered on it (editable installs of REPO
    redirected to the worktree)."""
    local = None if is_url(wt.source) else Path(wt.source)
    interp = projenv.probe(projenv.find_python(cfg.python, local))
    redirect = (str(local), str(wt.path)) if local is not None else None
    return projenv.create(wt.root / "env", interp, redirect)


def gate_texts(cfg: RunConfig, wt: Worktree) -> list[tuple[str, str]]:
    """The gate files as (label, text): at --gates-from when given, else in the worktree."""
    if cfg.gates_from:
        return setup_phase.gate_file_texts([], wt.git_dir, resolve_ref(wt.git_dir, cfg.gates_from), cfg.gates_file)
    return setup_phase.gate_file_texts([_inside(wt.path, p) for p in cfg.gates_file])


def load_setup(cfg: RunConfig, wt: Worktree, *, repository_setup: bool, warn: Callable[[str], None]
               ) -> list[SetupSpec]:
    """``--setup`` (or ``prime-ci.toml``'s ``setup`` when ``repository_setup``), then the gate files' ``[[setup]]``
    (at --gates-from when given). What the repository under review wrote runs without network: ``prime-ci.toml``'s
    entries and the tables of gate files read from the worktree or REPO (not at --gates-from)."""
    own = setup_phase.collect(cfg.setup, [])
    if repository_setup:
        own = setup_phase.offline(own, warn)
    if cfg.gates_from:
        files = setup_phase.from_gate_texts(gate_texts(cfg, wt))
    else:
        files = []
        for name in cfg.gates_file:
            path = _inside(wt.path, name)
            specs = setup_phase.from_gate_texts(setup_phase.gate_file_texts([path]))
            files += setup_phase.offline(specs, warn) if _from_repository(wt, path) else specs
    return setup_phase.collect([], own + files)


def _from_repository(wt: Worktree, path: Path) -> bool:
    """Whether a file read at ``path`` is the repository's text: in the worktree's directory or in REPO."""
    places = [wt.root] if is_url(wt.source) else [wt.root, Path(wt.source)]
    return inside_any(places, path, resolve=True)


def reach_paths(cfg: RunConfig, wt: Worktree, commands: list[str], project: ProjectEnv) -> list[str]:
    """What the sandbox must show read-only besides the worktree: --sandbox-ro / sandbox.read, $RUNNER_TEMP,
    files the gate and setup commands name by absolute path, and the project's interpreter."""
    paths = [p if Path(p).is_absolute() else str(wt.path / p) for p in cfg.sandbox_ro]
    for p in paths:
        if not Path(p).exists():
            raise ConfigError(f"--sandbox-ro: path not found: {p}")
    if runner_temp := os.environ.get("RUNNER_TEMP"):
        paths.append(runner_temp)
    paths += sandbox_mod.named_paths(commands)
    return [*paths, *project.readable()]


def load_gates(cfg: RunConfig, wt: Worktree) -> list[GateSpec]:
    specs = gates_from_commands(cfg.gate)
    if cfg.gates_from:
        specs += load_gate_files_from_ref(wt.git_dir, resolve_ref(wt.git_dir, cfg.gates_from), cfg.gates_file)
    else:
        specs += load_gate_files([_inside(wt.path, p) for p in cfg.gates_file])
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"duplicate gate name(s): {', '.join(dupes)}")
    if cfg.gate_timeout is not None:  # a table's own timeout wins
        specs = [s if "timeout" in s.model_fields_set else s.model_copy(update={"timeout": cfg.gate_timeout})
                 for s in specs]
    return specs


def _inside(root: Path, name: str) -> Path:
    path = Path(name)
    if path.is_absolute():
        return path
    if not inside(root, path, resolve=True):
        raise ConfigError(f"--gates-file: {name} points outside the repository")
    return (root / path).resolve()


def prepare_resume(
    out: Path, *, salvage: bool, say: Callable[[str], None]
) -> tuple[Prepared, ResumeState] | dict[str, Any]:
    """A finished run's result (resume is idempotent), or what is needed to continue an interrupted one."""
    p = plan(out.resolve(), salvage=salvage)
    if p.finished is not None:
        return p.finished
    cfg = p.cfg
    model = make_model(cfg.model or "", api_base=cfg.api_base, options=model_options(cfg))
    harness = HarnessRun.load(harness=cfg.harness, branch=cfg.harness_branch, propose=cfg.propose, wt=p.worktree,
                              run_id=p.run_id, untrusted=cfg.untrusted_file is not None, resume=True)
    sandbox, status, warning = sandbox_mod.resolve(cfg.sandbox, writable=[], readonly=[])
    if warning:
        say(f"warning: {warning}")
    saved = p.info.get("project")
    if saved is not None and (p.worktree.root / "env" / "pyvenv.cfg").is_file():
        project = ProjectEnv.from_json(saved)
    else:
        project = project_env(cfg, p.worktree)
    setup = [SetupSpec.model_validate(s) for s in p.info.get("setup", [])]
    builds = [BuildSpec.model_validate(b) for b in p.info.get("build", [])]
    commands = [g.command for g in p.gates] + [s.command for s in setup] + [b.command for b in builds]
    reach = reach_paths(cfg, p.worktree, commands, project)
    return Prepared(cfg, p.worktree, p.gates, model, p.out, p.run_id, harness, project, setup, sandbox, status,
                    reach, builds=builds), p.state
