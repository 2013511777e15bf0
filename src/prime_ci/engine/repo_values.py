"""The repository's own settings, checked where they would be used: a repository cannot stop a run.

``prime-ci.toml`` is part of the input under review. ``config.file_settings`` drops what a repository may not
set or sets malformed; ``admit`` drops what only shows as wrong against the worktree: gate files that are missing,
malformed, lead outside the worktree or repeat a gate name, malformed setup entries, an interpreter that is not
found, read-only paths that are missing or lead outside the worktree. Each is ignored with one warning
(DESIGN §13). The operator's own values are not looked at here: their errors stay exit 2 where they are used.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prime_ci.engine import setup as setup_phase
from prime_ci.engine.config import RunConfig, Warn
from prime_ci.errors import ConfigError
from prime_ci.gates.runner import gates_from_commands, load_gate_files, load_gate_files_from_ref
from prime_ci.gates.specs import collect_builds
from prime_ci.isolation import projenv
from prime_ci.isolation.paths import inside
from prime_ci.isolation.worktree import Worktree, read_file_at, resolve_ref


def warner(say: Callable[[str], None]) -> Warn:
    def warn(message: str) -> None:
        say(f"warning: {message}")
    return warn


def admit(cfg: RunConfig, wt: Worktree, repo_keys: set[str], warn: Warn) -> RunConfig:
    """``cfg`` without the repository's values (``repo_keys``) that would stop the run when used."""
    update: dict[str, Any] = {}

    def ignored(what: str, why: object) -> None:
        warn(f"repository settings: {what} ignored: {why}")

    if "gate" in repo_keys:
        update["gate"] = [c for c in cfg.gate if c.strip()]
        if len(update["gate"]) < len(cfg.gate):
            ignored("an empty gate command", "nothing to run")
    if "gates_file" in repo_keys:
        update["gates_file"] = []
        names = [g.name for g in gates_from_commands(update.get("gate", cfg.gate))]
        for name in cfg.gates_file:
            try:
                found = _gate_file_names(cfg, wt, name)
            except ConfigError as exc:
                ignored(f"gates-file {name!r}", exc)
                continue
            if repeated := sorted(set(found) & set(names)):
                ignored(f"gates-file {name!r}", f"gate name(s) already used: {', '.join(repeated)}")
                continue
            names += found
            update["gates_file"].append(name)
    if "setup" in repo_keys:
        update["setup"] = _named_entries(cfg.setup, "setup", lambda i: {s.name for s in setup_phase.collect([i], [])},
                                         ignored)
    if "build" in repo_keys:
        update["build"] = _named_entries(cfg.build, "build", lambda i: {b.name for b in collect_builds([i], [])},
                                         ignored)
    if "sandbox_ro" in repo_keys:
        update["sandbox_ro"] = []
        for p in cfg.sandbox_ro:
            if problem := _outside(wt.path, p):
                ignored(f"sandbox.read {p!r}", problem)
            else:
                update["sandbox_ro"].append(p)
    if "python" in repo_keys:
        try:
            projenv.probe(projenv.find_python(cfg.python, None))
        except ConfigError as exc:
            ignored(f"python {cfg.python!r}", exc)
            update["python"] = None
    return cfg.model_copy(update=update)


def _named_entries(items: list[str | dict[str, Any]], kind: str,
                   names_of: Callable[[str | dict[str, Any]], set[str]],
                   ignored: Callable[[str, object], None]) -> list[str | dict[str, Any]]:
    """The setup or build entries that are well formed and whose names are not taken by an earlier one."""
    kept: list[str | dict[str, Any]] = []
    taken: set[str] = set()
    for item in items:
        what = f"{kind} entry {str(item)[:80]!r}"
        try:
            these = names_of(item)
        except ConfigError as exc:
            ignored(what, exc)
            continue
        if these & taken:
            ignored(what, f"name(s) already used: {', '.join(these & taken)}")
            continue
        taken |= these
        kept.append(item)
    return kept


def _outside(root: Path, name: str) -> str | None:
    """Why ``name`` is not a path inside the worktree (symlinks followed), or None."""
    path = root / name
    if not path.exists():
        return "not found in the worktree"
    if not inside(root, name, resolve=True):
        return "it leads outside the worktree"
    return None


def _gate_file_names(cfg: RunConfig, wt: Worktree, name: str) -> list[str]:
    """The gate names in one of the repository's gate files, its ``[[setup]]`` tables checked too."""
    if cfg.gates_from:
        ref = resolve_ref(wt.git_dir, cfg.gates_from)
        specs = load_gate_files_from_ref(wt.git_dir, ref, [name])
        text = read_file_at(wt.git_dir, ref, name)
    else:
        if problem := _outside(wt.path, name):
            raise ConfigError(problem)
        specs = load_gate_files([wt.path / name])
        text = (wt.path / name).read_text(encoding="utf-8")
    setup_phase.from_gate_texts([(name, text)])
    return [g.name for g in specs]
