"""The artifacts at the end of a run, written so that one unwritable file never costs the others (DESIGN §5).

Every write is attempted; a failed one turns the outcome into ``persistence_error`` (exit 6) with a detail
naming the file, and the rest are still written: result.json and summary.md (rewritten after a failure so
they tell the final outcome), the session's stop record, the redaction sweep, the harness state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.artifacts import report
from prime_ci.artifacts.notebook import NotebookWriter
from prime_ci.artifacts.summary_parts import SummaryInputs, github_links
from prime_ci.errors import PersistenceError
from prime_ci.gates.judge import Judge
from prime_ci.gates.junit import write_gates_junit
from prime_ci.gates.runner import GateResult
from prime_ci.harness.in_run import HarnessRun
from prime_ci.harness.store import HarnessError
from prime_ci.isolation import durable
from prime_ci.isolation.worktree import GitError
from prime_ci.loop.agent import Agent
from prime_ci.session.log import SessionLog
from prime_ci.stops import StopReason

Say = Callable[[str], None]


@dataclass
class Artifacts:
    out: Path
    result: dict[str, Any]
    say: Say
    failures: list[str] = field(default_factory=list)
    inputs: SummaryInputs = field(default_factory=SummaryInputs)  # what summary.md shows beyond result.json

    def attempt(self, write: Callable[[], object]) -> bool:
        try:
            write()
        except PersistenceError as exc:
            self.fail(str(exc))
            return False
        return True

    def fail(self, message: str) -> None:
        if message in self.failures:
            return
        self.failures.append(message)
        self.say(f"artifact not written: {message}")
        result = self.result
        result["flags"] = [*result.get("flags", []), f"not written: {message}"]
        if result["stop_reason"] != StopReason.PERSISTENCE_ERROR:
            before = f"the run had ended with {result['stop_reason']}" + (
                f": {result['detail']}" if result.get("detail") else "")
            result.update(stop_reason=StopReason.PERSISTENCE_ERROR.value,
                          exit_code=StopReason.PERSISTENCE_ERROR.exit_code,
                          success=False, detail=f"{message} ({before})")

    def write_status(self) -> None:
        """result.json and summary.md; once more if one of them failed, so the other tells that too."""
        for _ in range(2):
            failed = len(self.failures)
            self.attempt(lambda: durable.write_json(self.out / "result.json", self.result))
            self.attempt(self._write_summary)
            if len(self.failures) == failed:
                return

    def _write_summary(self) -> None:
        durable.write(self.out / "summary.md", report.summary_markdown(self.result, self.inputs))


def summary_inputs(judge: Judge, patch: str, agent: Agent | None) -> SummaryInputs:
    """The rounds' failing tests, the patch, the model's last words and the run's page on GitHub."""
    said = [m.get("content") for m in agent.conversation.record if m.get("role") == "assistant"] if agent else []
    final = next((str(text) for text in reversed(said) if text and str(text).strip()), None)
    return SummaryInputs(failing=judge.round_failing, patch=patch, final_message=final,
                         links=github_links(os.environ))


def write_all(arts: Artifacts, *, patch: str, gates: Sequence[GateResult], notebook: NotebookWriter | None,
              log: SessionLog, harness: HarnessRun, push: bool) -> dict[str, Any]:
    """Write every artifact of a finished run; returns the result (``persistence_error`` if a write failed)."""
    out = arts.out
    arts.attempt(lambda: durable.write(out / "patch.diff", patch))
    arts.attempt(lambda: write_gates_junit(gates, out / "junit.xml"))
    if notebook is not None:
        arts.attempt(notebook.flush)
    arts.write_status()  # before the stop record: the harness branch commits result.json with the session
    arts.attempt(lambda: _close_log(log, arts.result))
    swept: list[Path] = []
    arts.attempt(lambda: swept.extend(durable.redact_tree(out)))
    if swept:
        arts.say(f"masked registered secrets in {len(swept)} artifact file(s)")
    arts.attempt(lambda: arts.result.update(harness=_harness(arts, harness, push)))
    arts.write_status()
    return arts.result


def _close_log(log: SessionLog, result: dict[str, Any]) -> None:
    """The stop record, last line of the session; the log is released even when it cannot be written."""
    try:
        log.custom("prime_ci.stop", {"stop_reason": result["stop_reason"], "exit_code": result["exit_code"],
                                     "detail": result["detail"]})
    finally:
        log.close()


def _harness(arts: Artifacts, harness: HarnessRun, push: bool) -> dict[str, Any]:
    out = arts.out
    try:
        return harness.finish(out, {"session.jsonl": out / "session.jsonl", "result.json": out / "result.json"}, push)
    except (HarnessError, GitError) as exc:
        arts.say(f"harness state not committed: {exc}")
        return {"error": str(exc)}
