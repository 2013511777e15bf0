"""The runner's verdict: gate rounds at the end of each turn, retries, unchanged-workspace skips.

The model never decides success: a turn ending only triggers a gate round here, and gates run from the
host as fresh processes, never from kernel state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.agent import Stop
from prime_ci.gates import GateResult, GateSpec, feedback_message, run_gates, workspace_fingerprint
from prime_ci.session import SessionLog
from prime_ci.worktree import Worktree


@dataclass
class Judge:
    specs: list[GateSpec]
    worktree: Worktree
    env: dict[str, str]
    log_dir: Path
    log: SessionLog
    max_retries: int
    exclude: list[str] = field(default_factory=list)
    launcher: list[str] = field(default_factory=list)
    last: list[GateResult] = field(default_factory=list)
    rounds: int = 0
    failed_rounds: int = 0
    goal_summary: str | None = None
    _last_fingerprint: str | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run_round(self, only: str | None = None) -> list[GateResult]:
        async with self._lock:
            results = await run_gates(self.specs, cwd=self.worktree.path, env=self.env, log_dir=self.log_dir,
                                      only=only, launcher=self.launcher)
            self.rounds += 1
            if only is None:
                self.last = results
            else:
                self.last = [r for r in self.last if r.name != only] + results
            self._last_fingerprint = workspace_fingerprint(self.worktree, self.exclude)
            self.log.custom("prime_ci.gate", {"round": self.rounds, "on_demand": only is not None,
                                              "results": [r.to_dict() for r in results]})
            return results

    def passed(self) -> bool:
        return bool(self.last) and all(r.passed for r in self.last)

    async def __call__(self) -> Stop | str:
        """Called when the model ends its turn."""
        if not self.specs:
            return Stop("completed", "the model finished its turn (no gates configured)")
        if self.last and not self.passed() and self._unchanged():
            self.failed_rounds += 1
            self.log.custom("prime_ci.gate", {"round": self.rounds, "skipped": "workspace unchanged"})
            if self.failed_rounds > self.max_retries:
                return Stop("gates_failed", "gates still failing and the workspace did not change")
            return (
                "Gates were not rerun: the workspace has not changed since the last failing round, so the "
                f"result would be the same (round {self.failed_rounds}/{self.max_retries} of retries used). "
                "Change the code to fix the failures above, then end your turn.\n\n"
                + feedback_message(self.last)
            )
        results = await self.run_round()
        if all(r.passed for r in results):
            return Stop("completed", "all gates passed")
        self.failed_rounds += 1
        if self.failed_rounds > self.max_retries:
            return Stop("gates_failed", f"gates still failing after {self.max_retries} retries")
        header = f"Gate round {self.rounds}: failed (retry {self.failed_rounds}/{self.max_retries}).\n\n"
        return header + feedback_message(self.last)

    async def final_round(self) -> None:
        """On a budget stop: one round for the report, unless nothing changed since the last one."""
        if self.specs and not (self.last and self._unchanged()):
            await self.run_round()

    def _unchanged(self) -> bool:
        return workspace_fingerprint(self.worktree, self.exclude) == self._last_fingerprint

    def full_results(self) -> list[dict[str, Any]]:
        """``gates.last`` for the kernel: every field, with the full output read back from the log."""
        out = []
        for r in self.last:
            item = r.to_dict()
            item["output"] = r.log_path.read_text(encoding="utf-8", errors="replace")
            item["failures"] = [f.__dict__ for f in r.failures]
            out.append(item)
        return out


async def standalone(specs: list[GateSpec], cwd: Path, log_dir: Path) -> list[GateResult]:
    """``prime-ci gates``: the same execution as in a run, in CWD, with the same scrubbed environment."""
    from prime_ci.sandbox import scrubbed_env

    home = log_dir / ".home"
    return await run_gates(specs, cwd=cwd, env=scrubbed_env(home), log_dir=log_dir)
