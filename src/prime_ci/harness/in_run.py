"""The continual harness inside a run: load it (directory or branch), put it in the prompt and the kernel,
serve the kernel's ``harness.*`` / ``refine.run()``, refine at the end of a turn or run, and commit or
propose the refined state on the harness branch.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.errors import ConfigError, PersistenceError
from prime_ci.harness.branch import commit_state, git_dir_of, load_branch, proposal_branch, push, write_pr_body
from prime_ci.harness.prompt import prompt_section, subagent_spec
from prime_ci.harness.refine import refine
from prime_ci.harness.skills import Skill, discover, kernel_preload, kernel_pythonpath
from prime_ci.harness.store import ChangeSet, HarnessError, HarnessStore
from prime_ci.isolation import durable
from prime_ci.isolation.paths import inside
from prime_ci.isolation.worktree import Worktree
from prime_ci.kernel.bridge import Handler, Refused
from prime_ci.loop.budget import Budget, BudgetExhausted
from prime_ci.model.protocol import Model
from prime_ci.model.usage import Cost, Usage
from prime_ci.session.log import SessionLog

MAX_ENTRY = 16_000


@dataclass
class HarnessRun:
    store: HarnessStore | None
    skills: list[Skill]
    run_id: str
    trust: str
    branch: str | None = None
    repo_git_dir: Path | None = None
    propose: bool = False
    warnings: list[str] = field(default_factory=list)
    changesets: list[ChangeSet] = field(default_factory=list)
    refine_requested: bool = False
    refine_instructions: str | None = None
    rationale: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, *, harness: Path | None, branch: str | None, propose: bool, wt: Worktree, run_id: str,
             untrusted: bool, resume: bool = False) -> HarnessRun:
        """Never from the worktree under review: skills inside it are refused by ``discover``."""
        root = harness.resolve() if harness else None
        repo_git_dir = None
        if branch is not None:
            source = Path(wt.source)
            repo_git_dir = git_dir_of(source) if source.exists() else wt.git_dir
            root = root or wt.root / "harness"
            root.mkdir(parents=True, exist_ok=True)
            if not resume:
                if any(root.iterdir()):
                    raise ConfigError(f"--harness {root}: must be empty when loading --harness-branch {branch}")
                load_branch(repo_git_dir, branch, root)
        if root is not None and inside(wt.path, root, resolve=True):
            raise ConfigError("--harness may not point inside the worktree under review")
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        store = HarnessStore(root) if root is not None else None
        skills, warnings = discover(root, worktree=wt.path)
        return cls(store, skills, run_id, "untrusted" if untrusted else "trusted", branch, repo_git_dir, propose,
                   warnings)

    def prompt_section(self) -> str:
        return prompt_section(self.store, skills=self.skills)

    def pythonpath(self) -> list[str]:
        return kernel_pythonpath(self.skills)

    def preload(self) -> str:
        return kernel_preload(self.skills)

    def subagent(self, name: str) -> tuple[str, str | None] | None:
        return subagent_spec(self.store, name) if self.store is not None else None

    def handlers(self, log: SessionLog) -> dict[str, Handler]:
        def need() -> HarnessStore:
            if self.store is None:
                raise Refused("no harness for this run (start it with --harness DIR or --harness-branch B)")
            return self.store

        def record(cs: ChangeSet) -> dict[str, Any]:
            self.changesets.append(cs)
            log.custom("prime_ci.harness", {"changeset": cs.to_json()})
            return {"id": cs.id, "ops": [f"{o.op} {o.kind}:{o.name}" for o in cs.ops], "trust": self.trust}

        async def list_(req: dict[str, Any]) -> Any:
            return [e.to_json() for e in need().list(req.get("kind"))]

        async def read(req: dict[str, Any]) -> Any:
            return need().read(str(req["kind"]), str(req["name"])).to_json()

        async def write(req: dict[str, Any]) -> Any:
            op, content = req.pop("op"), str(req.get("content") or "")
            if len(content) > MAX_ENTRY:
                raise Refused(f"harness entries are limited to {MAX_ENTRY} characters ({len(content)} given)")
            store, kind, name = need(), str(req["kind"]), str(req["name"])
            try:
                if op == "delete":
                    return record(store.delete(kind, name, source_run=self.run_id, trigger="agent"))
                method = store.create if op == "create" else store.update
                return record(method(kind, name, content, source_run=self.run_id, description=req.get("description"),
                                     model=req.get("model"), trust=self.trust, trigger="agent"))
            except HarnessError as exc:
                raise Refused(str(exc)) from None

        async def refine_run(req: dict[str, Any]) -> Any:
            need()
            self.refine_requested, self.refine_instructions = True, req.get("instructions")
            return {"scheduled": True, "note": "one refinement runs when this turn ends"}

        async def create(req: dict[str, Any]) -> Any:
            return await write({**req, "op": "create"})

        async def update(req: dict[str, Any]) -> Any:
            return await write({**req, "op": "update"})

        async def delete(req: dict[str, Any]) -> Any:
            return await write({**req, "op": "delete"})

        return {"harness.list": list_, "harness.read": read, "harness.create": create, "harness.update": update,
                "harness.delete": delete, "refine.run": refine_run}

    async def refine(self, model: Model, budget: Budget, session: SessionLog, instructions: str | None,
                     say: Callable[[str], None],
                     on_spend: Callable[[Usage, Cost | None, str], None] | None = None) -> None:
        """One refinement from the session so far, metered on the run's budget; applied, rejected or refused
        (the budget cannot fit the call), it is logged either way. ``on_spend`` hears the call's usage."""
        if self.store is None:
            return
        session.commit()
        try:
            outcome = await refine(model, self.store, session.path, instructions=instructions,
                                   source_run=self.run_id, trust=self.trust, budget=budget)
        except BudgetExhausted as exc:
            session.custom("prime_ci.harness", {"refine": "skipped", "reason": exc.reason.value,
                                                "detail": exc.detail})
            say(f"refinement skipped: {exc.detail} ({exc.reason.value})")
            return
        session.custom("prime_ci.usage", {**budget.usage(), "refine": True})
        if on_spend is not None:
            on_spend(outcome.usage, outcome.cost, "refinement")
        if outcome.changeset is not None:
            self.changesets.append(outcome.changeset)
            if outcome.plan is not None:
                self.rationale.append(outcome.plan.rationale)
            session.custom("prime_ci.harness", {"refine": "applied", "changeset": outcome.changeset.to_json()})
            say(f"refinement applied: change set {outcome.changeset.id}")
        else:
            session.custom("prime_ci.harness", {"refine": "rejected", "reason": outcome.reason,
                                                "rejection": outcome.rejection_id})
            say(f"refinement rejected: {outcome.reason}")

    def finish(self, out: Path, extra: dict[str, Path], push_it: bool) -> dict[str, Any]:
        """Copy the state to OUT/harness; commit (or propose) it on the harness branch; push if asked."""
        if self.store is None:
            return {}
        info: dict[str, Any] = {"changesets": [cs.id for cs in self.changesets]}
        copy_state(self.store.root, out / "harness")
        if self.branch is None or self.repo_git_dir is None:
            return info
        target = proposal_branch(self.branch, self.run_id) if self.propose else self.branch
        if self.propose and not self.changesets:
            info["proposal"] = None
            return info
        message = f"prime-ci harness state from run {self.run_id}" + (" (proposal)" if self.propose else "")
        files = {f"runs/{self.run_id}/{name}": path for name, path in extra.items()}
        commit = commit_state(self.repo_git_dir, target, self.store.root, files, message,
                              base_branch=self.branch if self.propose else None)
        info.update(branch=target, commit=commit)
        if self.propose:
            write_pr_body(out / "harness-pr.md", self.changesets, "\n\n".join(self.rationale) or "(agent edits)")
            info["pr_body"] = str(out / "harness-pr.md")
        if push_it:
            push(self.repo_git_dir, target)
            info["pushed"] = True
        return info


def copy_state(root: Path, dest: Path) -> None:
    """DEST becomes a copy of the harness state (an artifact: every file written through ``durable``)."""

    def copy(src: str, dst: str) -> None:
        durable.write(Path(dst), Path(src).read_bytes(), mode=os.stat(src).st_mode & 0o777)

    try:
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(root, dest, symlinks=True, copy_function=copy)
    except shutil.Error as exc:  # per-file errors collected by copytree: (src, dst, reason)
        first = exc.args[0][0]
        raise PersistenceError(f"cannot copy the harness state to {dest}: {first[1]}: {first[2]}") from exc
    except OSError as exc:
        raise PersistenceError(f"cannot copy the harness state to {dest}: {durable.describe(exc)}") from exc
