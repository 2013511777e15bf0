"""Everything validated before a run starts (or resumes): a ConfigError here means exit 2, nothing touched."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prime_ci import sandbox as sandbox_mod
from prime_ci.config import RunConfig, build_config, file_settings
from prime_ci.errors import ConfigError
from prime_ci.gates import GateSpec, gates_from_commands, load_gate_files, load_gate_files_from_ref
from prime_ci.harness_run import HarnessRun
from prime_ci.model import Model, make_model
from prime_ci.resume import ResumeState, plan
from prime_ci.sandbox import Sandbox
from prime_ci.session import entry_id
from prime_ci.worktree import Worktree, create_worktree


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
    sandbox: Sandbox | None = None
    sandbox_status: str = "off"


def prepare(flags: dict[str, Any]) -> Prepared:
    """Clone, read repo settings, validate everything. Raises ConfigError (exit 2) with nothing left behind."""
    run_id = new_run_id()
    worktree = create_worktree(str(flags.get("repo", ".")), flags.get("ref"))
    try:
        cfg = build_config(flags, file_settings(worktree.path))
        gates = load_gates(cfg, worktree)
        model = make_model(cfg.model or "", api_base=cfg.api_base)
        out = (cfg.out or Path("prime-ci-out") / run_id).resolve()
        if (out / "session.jsonl").exists():
            raise ConfigError(f"--out: {out} already holds a run (use `prime-ci resume {out}`)")
        harness = HarnessRun.load(harness=cfg.harness, branch=cfg.harness_branch, propose=cfg.propose, wt=worktree,
                                  run_id=run_id, untrusted=cfg.untrusted_file is not None)
        sandbox, status = sandbox_mod.resolve(cfg.sandbox, writable=[], readonly=[])
    except BaseException:
        worktree.remove()
        raise
    worktree.excludes = [".prime-ci"]
    return Prepared(cfg, worktree, gates, model, out, run_id, harness, sandbox, status)


def load_gates(cfg: RunConfig, wt: Worktree) -> list[GateSpec]:
    specs = gates_from_commands(cfg.gate)
    if cfg.gates_from:
        specs += load_gate_files_from_ref(wt.git_dir, cfg.gates_from, cfg.gates_file)
    else:
        specs += load_gate_files([_inside(wt.path, p) for p in cfg.gates_file])
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"duplicate gate name(s): {', '.join(dupes)}")
    return specs


def _inside(root: Path, name: str) -> Path:
    path = Path(name)
    if path.is_absolute():
        return path
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise ConfigError(f"--gates-file: {name} points outside the repository")
    return resolved


def prepare_resume(out: Path, *, salvage: bool) -> tuple[Prepared, ResumeState] | dict[str, Any]:
    """A finished run's result (resume is idempotent), or what is needed to continue an interrupted one."""
    p = plan(out.resolve(), salvage=salvage)
    if p.finished is not None:
        return p.finished
    cfg = p.cfg
    model = make_model(cfg.model or "", api_base=cfg.api_base)
    harness = HarnessRun.load(harness=cfg.harness, branch=cfg.harness_branch, propose=cfg.propose, wt=p.worktree,
                              run_id=p.run_id, untrusted=cfg.untrusted_file is not None, resume=True)
    sandbox, status = sandbox_mod.resolve(cfg.sandbox, writable=[], readonly=[])
    return Prepared(cfg, p.worktree, p.gates, model, p.out, p.run_id, harness, sandbox, status), p.state
