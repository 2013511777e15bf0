"""``prime-ci resume OUT_DIR``: continue an interrupted run from its session log.

The log is the source of truth: the settings (``--limits`` included) and worktree come from the ``prime_ci.run``
record, the conversation from the entries by Prime Agent's context rule (the latest compaction's summary, the
entries from its ``firstKeptEntryId`` on, what follows it: what the run itself continued with), the budget from
the last ``prime_ci.usage`` record plus the wall time already spent, the gate-retry count from the
``prime_ci.gate`` records. The kernel is started fresh and its last snapshot restored. A finished run is not
run again: resume returns its recorded result (idempotent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from prime_ci.artifacts.schemas import ResultModel, RoundEntry
from prime_ci.engine.config import RunConfig
from prime_ci.engine.prime_agent_context import provider_message
from prime_ci.errors import ConfigError
from prime_ci.gates.runner import GateSpec
from prime_ci.isolation import limits
from prime_ci.isolation.box import run_needle
from prime_ci.isolation.confined import read_in
from prime_ci.isolation.parse import json_loads
from prime_ci.isolation.procs import sweep
from prime_ci.isolation.worktree import Worktree, create_worktree
from prime_ci.kernel.bridge import remove_run_dirs
from prime_ci.loop.compact import summary_message
from prime_ci.loop.tool_call import wire_arguments
from prime_ci.session.log import SessionFile, read_session
from prime_ci.session.read import parts_text

INTERRUPTED = "[the run was interrupted before this cell finished; its effects are unknown]"


@dataclass
class ResumeState:
    session: SessionFile
    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    wall_spent: float = 0.0
    gate_rounds: int = 0
    failed_rounds: int = 0
    notes: list[str] = field(default_factory=list)
    replayed_replies: int = 0
    children: list[str] = field(default_factory=list)
    setup_done: bool = False
    # the judge's rounds before the interruption (summary.md's table, time to green) and what failed in each
    round_log: list[dict[str, Any]] = field(default_factory=list)
    round_failing: list[list[dict[str, Any]]] = field(default_factory=list)


def _provider_message(msg: dict[str, Any]) -> dict[str, Any]:
    role = msg["role"]
    if role == "toolResult":
        return {"role": "tool", "tool_call_id": msg.get("toolCallId", ""), "content": parts_text(msg["content"])}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": parts_text(msg["content"])}
        calls = [p for p in msg["content"] if p.get("type") == "toolCall"]
        if calls:
            out["tool_calls"] = [{"id": p["id"], "type": "function", "function": {
                "name": p["name"], "arguments": wire_arguments(_logged_arguments(p.get("arguments", {})))}}
                for p in calls]
        return out
    return {"role": role, "content": parts_text(msg["content"])}


def _logged_arguments(args: Any) -> str:
    """The arguments text of a logged tool call (raw when they were not JSON)."""
    if isinstance(args, dict) and isinstance(args.get("__raw__"), str):
        return str(args["__raw__"])
    return json.dumps(args)


def context_message(entry: dict[str, Any]) -> dict[str, Any] | None:
    """What an entry contributes to the model's context: messages and host messages; bookkeeping nothing."""
    kind = entry.get("type")
    if kind == "message":
        return _provider_message(entry["message"])
    if kind == "custom_message":
        return {"role": "user", "content": parts_text(entry["content"])}
    return None


def rebuild(session: SessionFile) -> ResumeState:
    """The provider conversation (without the system prompt) and the counters, from the log entries.

    prime-ci writes one linear branch, so the file order is the path from the root to the leaf.
    """
    state = ResumeState(session)
    path = session.entries
    start, tail = 0, path
    head: list[tuple[dict[str, Any], str | None]] = []
    compactions = [i for i, e in enumerate(path) if e.get("type") == "compaction"]
    if compactions:
        at = compactions[-1]
        compaction = path[at]
        head = [(summary_message(str(compaction.get("summary", ""))), compaction["id"])]
        first = compaction.get("firstKeptEntryId")
        start = next((i for i, e in enumerate(path[:at]) if e.get("id") == first), at)
        tail = path[start:at] + path[at + 1:]
    copied = _copied(path)
    kept = head + [(m, e["id"]) for e in tail
                   if (m := provider_message(e) if id(e) in copied else context_message(e)) is not None]
    messages = [m for m, _ in kept]
    ids: list[str | None] = [i for _, i in kept]
    for entry in path:
        if entry.get("type") == "message":
            state.replayed_replies += entry["message"]["role"] == "assistant"
        elif entry.get("type") == "custom":
            _count(state, entry.get("customType"), entry.get("data") or {})
    pending = {c["id"] for m in messages[-1:] for c in m.get("tool_calls") or []}
    for call_id in sorted(pending):  # no entry yet: the resumed run logs these answers
        messages.append({"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED})
        ids.append(None)
    state.messages, state.ids = messages, ids
    state.wall_spent = _wall_spent(session)
    return state


def _copied(path: list[dict[str, Any]]) -> set[int]:
    """The entries ``--from-session`` wrote from another session (``id()`` of each): read as that session's writer
    reads them (``prime_agent_context``), as the run's first request sent them; a ``!cmd``, a branch summary."""
    copied: set[int] = set()
    inside = False
    for entry in path:
        if entry.get("customType") == "prime_ci.from_session":
            inside = entry.get("type") == "custom"  # its record opens the copy, its note to the model closes it
        elif inside:
            copied.add(id(entry))
    return copied


def last_assistant(entries: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The latest assistant entry and its usage as Prime Agent reads it (its last attribution's aggregate)."""
    found = next((e for e in reversed(entries) if e.get("type") == "message"
                  and e["message"].get("role") == "assistant" and isinstance(e.get("id"), str)), None)
    if found is None:
        return None
    usage = found["message"].get("usage") or {}
    for e in entries:
        if e.get("type") == "child_usage_attributed" and e.get("targetId") == found["id"]:
            usage = e.get("aggregateUsage") or usage
    return found["id"], usage


def _count(state: ResumeState, custom_type: Any, data: dict[str, Any]) -> None:
    if custom_type == "prime_ci.usage":
        state.usage = data
    elif custom_type == "prime_ci.gate":
        _gate_round(state, data)
    elif custom_type == "prime_ci.setup":
        state.setup_done = all(r.get("passed") for r in data.get("results", []))
    elif custom_type == "prime_ci.child" and data.get("event") == "spawned":
        state.children.append(str(data.get("name")))


def _gate_round(state: ResumeState, data: dict[str, Any]) -> None:
    """A logged gate round: into the judge's rounds when it ran (and reads as one), into the retry count unless it
    was the model's own ``gates.run``."""
    try:
        entry = RoundEntry.model_validate({k: v for k, v in data.items() if k not in ("results", "failing")})
    except ValidationError:
        entry = None  # a round skipped as unchanged, or a record this prime-ci cannot show
    if entry is not None:
        state.round_log.append(entry.model_dump(mode="json", exclude_none=True))
        state.round_failing.append(_failing(data))
    if data.get("on_demand"):
        return
    state.gate_rounds = max(state.gate_rounds, int(data.get("round", 0)))
    if data.get("kind") == "fast":  # inconclusive unless tests still fail; a full run of the round follows
        failed = bool(data.get("still_failing"))
    else:
        failed = data.get("skipped") or any(not r.get("passed") for r in data.get("results", []))
    state.failed_rounds += bool(failed)


def _failing(data: dict[str, Any]) -> list[dict[str, Any]]:
    """What failed in a logged round: as the judge recorded it, or (a session written before it did) the failing
    tests its results name; only items that read as such."""
    items = data.get("failing")
    if not isinstance(items, list):
        items = [{"gate": r.get("name"), "test": f.get("test"), "message": f.get("message") or f.get("kind", "")}
                 for r in data.get("results", []) if isinstance(r, dict) and not r.get("passed")
                 for f in r.get("failures", []) if isinstance(f, dict)]
    return [f for f in items if isinstance(f, dict) and isinstance(f.get("gate"), str)
            and isinstance(f.get("test"), str | None) and isinstance(f.get("message", ""), str)]


def _wall_spent(session: SessionFile) -> float:
    stamps = [session.header.get("timestamp")] + [e.get("timestamp") for e in session.entries[-1:]]
    try:
        first, last = (datetime.fromisoformat(str(s).replace("Z", "+00:00")) for s in stamps)
    except ValueError:
        return 0.0
    return max(0.0, (last - first).total_seconds())


@dataclass
class ResumePlan:
    out: Path
    run_id: str
    cfg: RunConfig
    worktree: Worktree
    gates: list[GateSpec]
    state: ResumeState
    finished: dict[str, Any] | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the run's prime_ci.run record


# a run stopped by its provider goes on from its last entry once the provider answers again (`prime-ci resume`)
PROVIDER_STOPS = ("model_error",)


def plan(out: Path, *, salvage: bool) -> ResumePlan:
    """Read OUT_DIR; raise ConfigError (exit 2) or LogCorruptError (exit 6) when it cannot be resumed."""
    path = out / "session.jsonl"
    if not path.is_file():
        raise ConfigError(f"resume: {path} not found")
    # the log resume appends to: never a file outside OUT through a symlink
    session = read_session(path, strict=not salvage, data=read_in(out, path, "resume"))
    # entries another program (Prime Agent) appended continue the conversation elsewhere: refused before anything
    # is swept or re-created (exit 2, its own reason, not "corrupt")
    session.check_no_foreign_suffix()
    stop = session.last_custom("prime_ci.stop")
    info = session.last_custom("prime_ci.run")
    if info is None or "config" not in info:
        if not session.checksummed:  # no prime-ci header: another program's session (Prime Agent's)
            raise ConfigError(f"resume: {path} is not a prime-ci run's session (no prime_ci.run record); to go on "
                              f"with its conversation, start a run from it: prime-ci run REPO --from-session {path}")
        raise ConfigError(f"resume: {path} has no prime_ci.run record: the run never started")
    cfg, gates = _checked_record(info, path)
    provider_stop = stop is not None and stop.get("stop_reason") in PROVIDER_STOPS
    if stop is not None and not provider_stop:
        return ResumePlan(out, info["run_id"], cfg, _dead_worktree(info), [], ResumeState(session),
                          _finished(out, stop))
    state = rebuild(session)
    if provider_stop:
        state.notes.append("The run had stopped because the model's provider kept failing; it goes on now that "
                           "the provider answers.")
    if info.get("marker") and (stray := sweep(run_needle(info["marker"]))):
        state.notes.append(f"{stray} process(es) left over from the interrupted run were stopped.")
    if info.get("marker"):  # its cgroups went with the sweep; its bridges' socket directories are left
        remove_run_dirs(info["marker"])
    wt_info = info["worktree"]
    wt = Worktree(Path(wt_info["path"]), Path(wt_info["git_dir"]), info["base_commit"], Path(wt_info["root"]),
                  wt_info["source"], [".prime-ci"])
    if not wt.path.is_dir() or not wt.git_dir.is_dir():
        wt = create_worktree(wt_info["source"], info["base_commit"])
        wt.excludes = [".prime-ci"]
        if provider_stop and _reapplied(wt, out / "patch.diff"):  # the run's end removed it; its patch is kept
            state.notes.append("The worktree was checked out again at the base commit and the run's patch, as it "
                               "was when the run stopped, applied to it.")
        else:
            state.notes.append("The worktree was lost with the interruption and was checked out again at the base "
                               "commit: changes made before the interruption are gone and must be redone.")
    return ResumePlan(out, info["run_id"], cfg, wt, gates, state, info=info)


class _WorktreeRecord(BaseModel):
    path: str
    git_dir: str
    root: str
    source: str


class _RunRecord(BaseModel):
    """What resume reads from the run's ``prime_ci.run`` record (the rest is read where it is used)."""

    run_id: str
    base_commit: str
    config: dict[str, Any]
    worktree: _WorktreeRecord
    gates: list[GateSpec] = Field(default_factory=list)


def _checked_record(info: dict[str, Any], path: Path) -> tuple[RunConfig, list[GateSpec]]:
    """The settings and gates of a ``prime_ci.run`` record; ConfigError (exit 2) naming what is wrong with it."""
    try:
        record = _RunRecord.model_validate(info)
        config = record.config
        if "limits" not in config:  # recorded before the limits were a setting: the run had them from the environment
            config = {**config, "limits": limits.resolve(None)}
        return RunConfig.model_validate(config), record.gates
    except ValidationError as exc:
        raise ConfigError(f"resume: {path}: the prime_ci.run record is not prime-ci's: {_first_error(exc)}") from None


def _reapplied(wt: Worktree, patch: Path) -> bool:
    """``patch`` (the run's patch.diff) applied to the fresh worktree; False when there is none or it does not
    apply (the worktree is then the base commit's)."""
    if not patch.is_file() or patch.is_symlink() or not patch.stat().st_size:
        return False
    done = wt.git(["apply", "--binary", "--whitespace=nowarn", "-"], input=patch.read_bytes(), check=False)
    return done.returncode == 0


def _finished(out: Path, stop: dict[str, Any]) -> dict[str, Any]:
    """The outcome of a finished run: its result.json, else its stop record; ConfigError when it is not one."""
    result_path = out / "result.json"
    try:
        if not result_path.is_file():
            _StopRecord.model_validate(stop)
            return dict(stop)
        data = json_loads(read_in(out, result_path, "resume"))  # never a file outside OUT through a symlink
        ResultModel.model_validate(data)
    except ValueError as exc:  # not JSON, not UTF-8, or not a result (pydantic's ValidationError is a ValueError)
        what = _first_error(exc) if isinstance(exc, ValidationError) else str(exc)[:200]
        raise ConfigError(f"resume: the finished run's {result_path.name if result_path.is_file() else 'stop record'}"
                          f" in {out} is not prime-ci's: {what}") from None
    assert isinstance(data, dict)
    return data


class _StopRecord(BaseModel):
    stop_reason: str
    exit_code: int


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(map(str, err['loc'])) or 'record'}: {err['msg']}"


def _dead_worktree(info: dict[str, Any]) -> Worktree:
    w = info["worktree"]
    return Worktree(Path(w["path"]), Path(w["git_dir"]), info["base_commit"], Path(w["root"]), w["source"])
