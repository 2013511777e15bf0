"""The runner's verdict: gate rounds at the end of each turn, retries, unchanged-workspace skips.

The model never decides success: a turn ending only triggers a gate round here, and gates run from the
host as fresh processes, never from kernel state. Every round (fast, full, on demand) starts with the builds
(:mod:`prime_ci.gates.builds`); a failed build is the round's result and the gates do not run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from prime_ci.gates import environment_errors
from prime_ci.gates.builds import Builder, BuildOutcome
from prime_ci.gates.bytecode import drop_tree_bytecode
from prime_ci.gates.fast_rerun import FastRerun, plan_rerun
from prime_ci.gates.junit import status_text
from prime_ci.gates.runner import GateResult, GateSpec, feedback_message, run_gates, workspace_fingerprint
from prime_ci.isolation import hold
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.untrusted import strip_ansi
from prime_ci.isolation.worktree import Worktree
from prime_ci.session.log import SessionLog
from prime_ci.stops import Stop, StopReason

TAIL_LINES = 15  # of a failed build's log, or of a gate's that named no failing test


@dataclass
class Judge:
    """Gate rounds and their verdict.

    A retry round (the last full run of some gates failed on tests they can rerun, see
    :mod:`prime_ci.gates.fast_rerun`, and the workspace changed) first reruns just those tests. If they still
    fail, that is the round's result, fed back at once and counted like any failed round; otherwise the
    full gates run in the same round. Only a full run passes a round. The kernel's ``gates.run()`` and
    ``final_round`` always run the full gates.

    ``last`` holds each gate's most recent result: the full run's, except after a round that a fast rerun
    ended, where the rerun gates hold their fast result (command and ``<name>.fast.log``; ``kind`` "fast"
    in ``full_results``) and the others keep their last full result. ``passed()`` is never true with a fast
    result in ``last``, and ``final_round`` replaces fast results by a full run, so a report written after
    it (junit.xml, result.json) shows full runs. ``round_log`` has one entry per run: a round that a fast
    rerun did not settle has a ``fast`` and a ``full`` entry under the same round number.
    """

    specs: list[GateSpec]
    worktree: Worktree
    env: dict[str, str]
    log_dir: Path
    log: SessionLog
    max_retries: int
    exclude: list[str] = field(default_factory=list)
    launcher: list[str] = field(default_factory=list)
    limits: Limits = field(kw_only=True)  # the run's, for each gate attempt's box
    builds: Builder | None = field(default=None, kw_only=True)
    clock: Callable[[], float] = time.monotonic  # seconds into the run, for each round's ``at_s``
    last: list[GateResult] = field(default_factory=list)
    rounds: int = 0
    failed_rounds: int = 0
    goal_summary: str | None = None
    round_log: list[dict[str, Any]] = field(default_factory=list)
    round_failing: list[list[dict[str, Any]]] = field(default_factory=list)  # per ``round_log`` entry: what failed
    on_round: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None  # each entry as it is logged
    _reruns: dict[str, FastRerun] = field(default_factory=dict)
    _fast_in_last: set[str] = field(default_factory=set)
    _last_fingerprint: str | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    skipped: bool = False  # the last verdict repeated a failure: the workspace had not changed
    hold_run: str | None = None  # the run whose kernel boxes are stopped while a round runs (``_held``)
    _holding: bool = False

    async def run_round(self, only: str | None = None) -> list[GateResult]:
        """A full round: every gate, or just ``only`` (the kernel's ``gates.run(name)``), after the builds."""
        async with self._lock, self._held():
            self.rounds += 1
            if await self._build(on_demand=only is not None) is not None:
                return self.last
            return await self._full(only)

    @asynccontextmanager
    async def _held(self) -> AsyncIterator[None]:
        """The verdict's work (the unchanged check, builds, gates, the fingerprint after them) with the model's
        processes stopped (:mod:`prime_ci.isolation.hold`), when ``hold_run`` names the run; nested: the outermost
        stops and continues them."""
        if self.hold_run is None or self._holding:
            yield
            return
        self._holding = True
        try:
            stopped = await asyncio.to_thread(hold.stop, self.hold_run)
            try:
                yield
            finally:
                await asyncio.to_thread(hold.resume, stopped)
        finally:
            self._holding = False

    def changed_since_verdict(self) -> bool:
        """Whether the workspace is no longer what the last round tested (a process of the model's that ran on
        after it): then the patch is not what the gates passed."""
        return self._last_fingerprint is not None and not self._unchanged()

    async def _build(self, *, on_demand: bool = False) -> str | None:
        """The builds before a round's gates (every round starts here, without the worktree's bytecode of the
        round before: :mod:`prime_ci.gates.bytecode`); the feedback when one failed, else None."""
        await asyncio.to_thread(drop_tree_bytecode, self.env, self.worktree.path)
        if self.builds is None:
            return None
        if not self.builds.specs:
            await self.builds.run()  # nothing to build; what is outside the worktree is compared all the same
            return None
        started = time.monotonic()
        outcomes = await self.builds.run()
        self.log.custom("prime_ci.build", {"round": self.rounds, "results": [o.model_dump() for o in outcomes]})
        failed = self.builds.failed()
        if failed is None:
            return None
        self._last_fingerprint = workspace_fingerprint(self.worktree, self.exclude)
        entry: dict[str, Any] = {"round": self.rounds, "kind": "build", "passed": False, "gates": [failed.name],
                                 "duration_s": round(time.monotonic() - started, 3), "on_demand": on_demand,
                                 "at_s": round(self.clock(), 3)}
        failing = [build_failure(failed, self.builds.log_text(failed))]
        self._append(entry, failing)
        # a failed round, as resume counts rounds
        self.log.custom("prime_ci.gate", {**entry, "failing": failing, "results": [o.model_dump() for o in outcomes]})
        return self.builds.feedback(failed)

    async def _full(self, only: str | None) -> list[GateResult]:
        started = time.monotonic()
        async with self._gates_running():
            results = await run_gates(self.specs, cwd=self.worktree.path, env=self.env, log_dir=self.log_dir,
                                      only=only, launcher=self.launcher, limits=self.limits)
        if only is None:
            self.last, self._reruns = results, {}
            self._fast_in_last.clear()
        else:
            self.last = [r for r in self.last if r.name != only] + results
            self._reruns.pop(only, None)
            self._fast_in_last.discard(only)
        specs = {s.name: s for s in self.specs}
        for r in results:
            if rerun := plan_rerun(specs[r.name], r, self.worktree.path):
                self._reruns[r.name] = rerun
        self._last_fingerprint = workspace_fingerprint(self.worktree, self.exclude)
        self._record("full", results, started, on_demand=only is not None)
        return results

    async def _fast(self) -> str | None:
        """Rerun the failing tests of the last full run; the feedback if they still fail, else None."""
        started = time.monotonic()
        root = self.worktree.path
        results: list[GateResult] = []
        failing: list[str] = []
        count = 0
        for rerun in [r for s in self.specs if (r := self._reruns.get(s.name))]:
            if tests := rerun.current_tests(root):
                count += len(tests)
                async with self._gates_running():
                    result = await rerun.run(tests, cwd=root, env=self.env, log_dir=self.log_dir,
                                             launcher=self.launcher, limits=self.limits)
                results.append(result)
                if rerun.settles(result, root):
                    failing.append(rerun.spec.name)
        if not results:
            return None
        named = [replace(r, name=r.name.removesuffix(".fast")) for r in results]
        self._record("fast", named, started, tests=count, still_failing=failing)
        if not failing:
            return None
        self.last = [r for r in self.last if r.name not in {n.name for n in named}] + named
        self._fast_in_last.update(r.name for r in named)
        self._last_fingerprint = workspace_fingerprint(self.worktree, self.exclude)
        others = [r.name for r in self.last if not r.passed and r.name not in self._fast_in_last]
        untouched = f" Not rerun in this round (failing in the last full run): {', '.join(others)}." if others else ""
        notes = "".join(f" {note}" for s in self.specs if (r := self._reruns.get(s.name)) and (note := r.note()))
        return (
            f"This round was a fast rerun of the {count} previously failing test(s) of gate(s) "
            f"{', '.join(r.name for r in named)}, not the full gates, and they still fail; the full gates run "
            f"once these pass.{untouched}{notes}\n\n" + feedback_message(results)
        )

    def _record(self, kind: Literal["fast", "full"], results: list[GateResult], started: float, *,
                on_demand: bool = False, tests: int = 0, still_failing: list[str] | None = None) -> None:
        entry: dict[str, Any] = {
            "round": self.rounds, "kind": kind, "duration_s": round(time.monotonic() - started, 3),
            "passed": all(r.passed for r in results), "gates": [r.name for r in results], "on_demand": on_demand,
            "at_s": round(self.clock(), 3),
        }
        if kind == "fast":
            entry.update(tests=tests, still_failing=still_failing or [])
        failing = failing_tests(results)
        self._append(entry, failing)
        self.log.custom("prime_ci.gate", {**entry, "failing": failing, "results": [r.to_dict() for r in results]})

    def _append(self, entry: dict[str, Any], failing: list[dict[str, Any]]) -> None:
        self.round_log.append(entry)
        self.round_failing.append(failing)
        if self.on_round is not None:
            self.on_round(entry, failing)

    def _gates_running(self) -> AbstractAsyncContextManager[None]:
        """What a gate run writes in the worktree's ignored files is the run's (``Builder.gates_running``)."""
        return self.builds.gates_running() if self.builds is not None else nullcontext()

    def passed(self) -> bool:
        return bool(self.last) and all(r.passed for r in self.last) and not self._fast_in_last and not self._broken()

    def _broken(self) -> bool:
        return self.builds is not None and self.builds.failed() is not None

    async def __call__(self) -> Stop | str:
        """Called when the model ends its turn."""
        if not self.specs:
            return Stop(StopReason.COMPLETED, "the model finished its turn (no gates configured)")
        async with self._held():
            return await self._turn_verdict()

    async def _turn_verdict(self) -> Stop | str:
        self.skipped = bool(self.last or self._broken()) and not self.passed() and self._unchanged()
        if self.skipped:
            self.failed_rounds += 1
            self.log.custom("prime_ci.gate", {"round": self.rounds, "skipped": "workspace unchanged"})
            if self.failed_rounds > self.max_retries:
                return Stop(StopReason.GATES_FAILED, "gates still failing and the workspace did not change")
            return (
                "Gates were not rerun: the workspace has not changed since the last failing round, so the "
                f"result would be the same (round {self.failed_rounds}/{self.max_retries} of retries used). "
                "Change the code to fix the failures above, then end your turn.\n\n" + self._last_feedback()
            )
        async with self._lock:
            self.rounds += 1
            fast_feedback = build_feedback = await self._build()
            if build_feedback is None and self._reruns:
                fast_feedback = await self._fast()
            results = [] if fast_feedback is not None else await self._full(None)
        if fast_feedback is None and all(r.passed for r in results):
            return Stop(StopReason.COMPLETED, "all gates passed")
        if (fault := self.environment_fault()) is not None:
            return Stop(StopReason.ENVIRONMENT_ERROR, fault)
        self.failed_rounds += 1
        if self.failed_rounds > self.max_retries:
            what = "the build still failing" if build_feedback is not None else "gates still failing"
            return Stop(StopReason.GATES_FAILED, f"{what} after {self.max_retries} retries")
        what = ("build failed" if build_feedback is not None else
                "fast rerun still failing" if fast_feedback is not None else "failed")
        header = f"Gate round {self.rounds}: {what} (retry {self.failed_rounds}/{self.max_retries}).\n"
        if build_feedback is None and self.builds is not None and self.builds.last:
            built = ", ".join(o.name for o in self.builds.last)
            header += f"The builds ran first ({built}: ok), so the gates tested what your sources build to.\n"
        return header + (fast_feedback or "\n" + feedback_message(self.last))

    def environment_fault(self) -> str | None:
        """A failed build or gate of the last round that failed for want of its environment, in one line."""
        if self.builds is not None and (failed := self.builds.failed()) is not None:
            fault = environment_errors.recognise(self.builds.log_text(failed), failed.exit_code, build=True)
            return fault.detail(f"build {failed.name}", failed.command) if fault else None
        for result in (r for r in self.last if not r.passed):
            failing = [f"{f.message}\n{f.text}" for f in result.failures if f.message or f.text]
            if fault := environment_errors.recognise_gate(result.output, result.exit_code, failing):
                return fault.detail(f"gate {result.name}", result.command)
        return None

    def _last_feedback(self) -> str:
        """The last failing round's feedback again (a fast result's log is <name>.fast.log)."""
        if self.builds is not None and (failed := self.builds.failed()) is not None:
            return self.builds.feedback(failed)
        return feedback_message([replace(r, name=f"{r.name}.fast") if r.name in self._fast_in_last else r
                                 for r in self.last])

    async def final_round(self) -> None:
        """On a budget stop: one full round for the report, unless nothing changed since the last full one."""
        if not self.specs:
            return
        async with self._held():
            if not ((self.last or self._broken()) and not self._fast_in_last and self._unchanged()):
                await self.run_round()

    def _unchanged(self) -> bool:
        return workspace_fingerprint(self.worktree, self.exclude) == self._last_fingerprint

    def full_results(self) -> list[dict[str, Any]]:
        """``gates.last`` for the kernel: every field, with the full output read back from the log."""
        out = []
        if self.builds is not None and (failed := self.builds.failed()) is not None:
            out.append({**failed.model_dump(), "name": f"build: {failed.name}", "kind": "build", "flaky": False,
                        "output": self.builds.log_text(failed)})
        for r in self.last:
            item = r.to_dict()
            item["output"] = r.log_path.read_text(encoding="utf-8", errors="replace")
            item["failures"] = [f.__dict__ for f in r.failures]
            item["kind"] = "fast" if r.name in self._fast_in_last else "full"
            out.append(item)
        return out


def time_to_green(round_log: list[dict[str, Any]]) -> float | None:
    """When the first round that passed in full ended, in seconds into the run; None when none did."""
    return next((r["at_s"] for r in round_log if r["kind"] == "full" and r["passed"] and r.get("at_s") is not None),
                None)


def failing_tests(results: list[GateResult]) -> list[dict[str, Any]]:
    """What failed in a run of the gates: each failing test (``test``, the first line of its message as
    ``message``, ``file``/``line`` where the runner gave them); a failed gate that named none is one item with
    ``test`` None, how it ended, and the end of its output (``detail``)."""
    out: list[dict[str, Any]] = []
    for r in results:
        if r.passed:
            continue
        for f in r.failures:
            first = next((line.strip() for line in f.message.splitlines() if line.strip()), f.kind)
            out.append({"gate": r.name, "test": f.test, "message": first, "file": f.file, "line": f.line})
        if r.more_failures:
            out.append({"gate": r.name, "test": None, "message": f"and {r.more_failures} more failing test(s)"})
        if not r.failures:
            out.append({"gate": r.name, "test": None, "message": status_text(r), "detail": _tail(r.output)})
    return out


def build_failure(outcome: BuildOutcome, log: str) -> dict[str, Any]:
    """A failed build as one item of :func:`failing_tests`' shape."""
    state = "timed out" if outcome.timed_out else f"exit {outcome.exit_code}"
    return {"gate": f"build: {outcome.name}", "test": None, "message": f"the build failed ({state})",
            "detail": _tail(log)}


def _tail(text: str) -> list[str]:
    lines = [line.rstrip()[:300] for line in strip_ansi(text).splitlines() if line.strip()]
    return lines[-TAIL_LINES:]
