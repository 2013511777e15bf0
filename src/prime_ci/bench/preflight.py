"""Before a bench starts: harness snapshots, plain-directory repositories made into git repositories with a
fixed commit, and ``state.json``, which a bench run again into the same ``--out`` must match."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from prime_ci.bench.driver import HarnessState, Plan
from prime_ci.errors import ConfigError
from prime_ci.harness.branch import git_dir_of, load_branch
from prime_ci.harness.store import HarnessError
from prime_ci.isolation import durable
from prime_ci.isolation.worktree import commit_directory, is_url

HARNESS_ENTRIES = ("prompts", "memories", "skills", "subagents", "history.jsonl")
# a fixed author, committer and date: the same directory is the same base commit in every shard
FIXED = {"GIT_AUTHOR_NAME": "prime-ci bench", "GIT_AUTHOR_EMAIL": "bench@prime-ci",
         "GIT_COMMITTER_NAME": "prime-ci bench", "GIT_COMMITTER_EMAIL": "bench@prime-ci",
         "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def harness_states(out: Path, given: list[str], repo: Path) -> list[HarnessState]:
    """Snapshots of each ``--harness`` (a directory, else a harness branch of ``repo``) under OUT/harness/."""
    if not given:
        return [HarnessState("default", "default", "none", None)]
    states: list[HarnessState] = []
    for value in given:
        path = Path(value)
        if path.is_dir() and any(path.iterdir()) and not any((path / n).exists() for n in HARNESS_ENTRIES):
            raise ConfigError(f"--harness {value}: not a harness state (none of {', '.join(HARNESS_ENTRIES)})")
        name = re.sub(r"[^A-Za-z0-9._-]", "-", path.name if path.is_dir() else value).strip("-.") or "harness"
        label, n = name, 2
        while any(s.label == label for s in states):
            label, n = f"{name}-{n}", n + 1
        dest = out / "harness" / label
        fresh = dest.with_name(f".{label}.new")
        shutil.rmtree(fresh, ignore_errors=True)
        if path.is_dir():
            shutil.copytree(path, fresh, symlinks=True)
            source = value
        else:
            try:
                found = load_branch(git_dir_of(repo), value, fresh)
            except HarnessError as exc:
                raise ConfigError(f"--harness {value}: {exc}") from None
            if not found:
                raise ConfigError(f"--harness {value}: neither a directory nor a harness branch of {repo}")
            source = f"branch {value}"
        if dest.exists() and digest(dest) != digest(fresh):
            shutil.rmtree(fresh)
            raise ConfigError(f"--harness {value}: differs from the state this bench started with ({dest}); "
                              "use a new --out, or remove it")
        if dest.exists():
            shutil.rmtree(fresh)
        else:
            fresh.rename(dest)
        states.append(HarnessState(label, name, source, dest))
    return states


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def is_git_repo(path: Path) -> bool:
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def materialize(plan: Plan) -> None:
    """Each task whose repository is a plain directory gets a git repository of it (OUT/repos/), once."""
    made: dict[str, str] = {}
    for task in plan.suite.tasks:
        if is_url(task.repo) or is_git_repo(Path(task.repo)):
            continue
        if task.repo not in made:
            made[task.repo] = str(_commit_directory(Path(task.repo), plan.out / "repos"))
        plan.repos[task.id] = (made[task.repo], task.ref)


def _commit_directory(src: Path, parent: Path) -> Path:
    key = hashlib.sha256(str(src.resolve()).encode()).hexdigest()[:10]
    dest = parent / f"{src.name}-{key}"
    if (dest / ".git").is_dir():
        return dest
    tmp = parent / f".{dest.name}.new"
    shutil.rmtree(tmp, ignore_errors=True)
    commit_directory(src, tmp, f"{src.name}: bench base", env=FIXED)
    tmp.rename(dest)
    return dest


def check_state(plan: Plan) -> None:
    """OUT/state.json: what this bench is. A bench run again into the same OUT must compare the same things
    (harness states, model, repeat, shard); the suite may change: a task whose definition changed runs again
    (its record's fingerprint), an unchanged one keeps its verdict. The endpoint (--api-base) may change."""
    state: dict[str, Any] = {"harnesses": [h.label for h in plan.harnesses], "model": plan.model,
                             "repeat": plan.repeat,
                             "shard": None if plan.shard is None else f"{plan.shard[0]}/{plan.shard[1]}"}
    path = plan.out / "state.json"
    if path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        differs = [f"{k}: {before.get(k)!r} then, {v!r} now" for k, v in state.items() if before.get(k) != v]
        if differs:
            raise ConfigError(f"{plan.out} holds another bench ({'; '.join(differs)}): use a new --out to start "
                              "one, or the same options to continue it")
        state["wall_s"] = float(before.get("wall_s", 0.0))
    else:
        plan.out.mkdir(parents=True, exist_ok=True)
        state["wall_s"] = 0.0
    durable.write_json(path, {**state, "suite": str(plan.suite.path)})


def add_wall(out: Path, seconds: float) -> float:
    """The bench's wall clock over every invocation into OUT (a resumed bench counts its earlier parts)."""
    path = out / "state.json"
    state = json.loads(path.read_text(encoding="utf-8"))
    state["wall_s"] = round(float(state.get("wall_s", 0.0)) + seconds, 3)
    durable.write_json(path, state)
    return float(state["wall_s"])
