"""One refinement of the harness: a single model call offering only ``submit_refinement``, then a plan that
is validated, limited and applied atomically as one change set, or rejected and recorded.

Rejected plans leave the harness state unchanged; they are kept in ``<harness>/rejected.jsonl`` (id, ts,
reason, raw arguments) so the refusal is on disk. The packaged base prompt is never a target.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prime_ci.errors import PrimeCIError
from prime_ci.harness.store import (
    KINDS,
    Change,
    ChangeSet,
    HarnessCorrupt,
    HarnessError,
    HarnessStore,
    check_name,
    read_jsonl,
)
from prime_ci.isolation import durable
from prime_ci.loop.budget import Budget, Limits
from prime_ci.model.protocol import Model
from prime_ci.model.usage import Cost, Usage
from prime_ci.session.log import SessionFile, now_iso, read_session

MAX_OPS = 5
MAX_CHARS = 4000  # per op content, per op evidence, and the rationale
BASE_NAMES = frozenset({"base", "system"})
ENTRY_ID = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{8}(?![0-9A-Za-z])")
TOOL_CLIP = 1500
TRAJECTORY_LIMIT = 60_000
STATE_LIMIT = 20_000


class PlanOp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["create", "update", "delete"]
    kind: Literal["prompt", "memory", "skill", "subagent"]
    name: str = Field(description="entry name: 1-64 of [a-z0-9._-], starting with [a-z0-9]")
    content: str = Field(description="full markdown text of the entry ('' for delete); may start with --- "
                                     "frontmatter holding description (and model for a subagent)")
    evidence: str = Field(description="why, citing the 8-hex ids of the session entries this is based on")


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rationale: str = Field(description="what the run showed and why these changes help later runs")
    ops: list[PlanOp]


class PlanRejected(PrimeCIError):
    """A refinement plan was refused; ``reason`` says why."""

    exit_code = 1

    def __init__(self, reason: str) -> None:
        super().__init__(f"refinement plan rejected: {reason}")
        self.reason = reason


def plan_schema() -> dict[str, Any]:
    """JSON Schema of a refinement plan (the arguments of ``submit_refinement``), refs inlined."""
    schema = Plan.model_json_schema()
    op_schema = schema.pop("$defs")["PlanOp"]
    op_schema["properties"]["content"]["maxLength"] = MAX_CHARS
    op_schema["properties"]["evidence"]["maxLength"] = MAX_CHARS
    schema["properties"]["ops"] = {"type": "array", "items": op_schema, "maxItems": MAX_OPS,
                                   "description": f"at most {MAX_OPS} operations"}
    return schema


REFINE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit_refinement",
        "description": "Submit the refinement plan for the harness (call exactly once).",
        "parameters": plan_schema(),
    },
}


def _pydantic_errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {e['msg']}" for e in exc.errors()[:5])


def validate_plan(raw_args: str, session_ids: set[str], store: HarnessStore) -> Plan:
    """Parse and check a plan against the limits, the session and the current harness state."""
    try:
        data = json.loads(raw_args)
    except ValueError as exc:
        raise PlanRejected(f"the arguments are not valid JSON: {exc}") from None
    ops_data = data.get("ops") if isinstance(data, dict) else None
    for n, item in enumerate(ops_data if isinstance(ops_data, list) else [], start=1):
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind is not None and kind not in KINDS:
            raise PlanRejected(f"op {n} targets {kind!r}: only {', '.join(KINDS)} entries can change; "
                               "the base prompt is never a target")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        raise PlanRejected(f"the plan does not match the schema: {_pydantic_errors(exc)}") from None
    if not plan.ops:
        raise PlanRejected("the plan has no operations")
    if len(plan.ops) > MAX_OPS:
        raise PlanRejected(f"the plan has {len(plan.ops)} operations; at most {MAX_OPS} are allowed")
    if not plan.rationale.strip() or len(plan.rationale) > MAX_CHARS:
        raise PlanRejected(f"the rationale must be 1-{MAX_CHARS} characters, not {len(plan.rationale)}")
    seen: set[tuple[str, str]] = set()
    for n, op in enumerate(plan.ops, start=1):
        where = f"op {n} ({op.op} {op.kind}:{op.name})"
        if op.name in BASE_NAMES:
            raise PlanRejected(f"{where} targets the base prompt, which is fixed and never refined")
        try:
            check_name(op.kind, op.name)
        except HarnessError as exc:
            raise PlanRejected(f"{where}: {exc}") from None
        if (op.kind, op.name) in seen:
            raise PlanRejected(f"{where}: the entry is changed twice in one plan")
        seen.add((op.kind, op.name))
        if len(op.content) > MAX_CHARS:
            raise PlanRejected(f"{where}: content has {len(op.content)} characters; at most {MAX_CHARS}")
        if len(op.evidence) > MAX_CHARS:
            raise PlanRejected(f"{where}: evidence has {len(op.evidence)} characters; at most {MAX_CHARS}")
        if op.op != "delete" and not op.content.strip():
            raise PlanRejected(f"{where}: content is empty")
        cited = ENTRY_ID.findall(op.evidence)
        if not any(c in session_ids for c in cited):
            unknown = f" (not in the session: {', '.join(cited[:5])})" if cited else ""
            raise PlanRejected(f"{where}: evidence cites no entry id of the session{unknown}")
        exists = store.get(op.kind, op.name) is not None
        if op.op == "create" and exists:
            raise PlanRejected(f"{where}: the entry already exists (use update)")
        if op.op != "create" and not exists:
            raise PlanRejected(f"{where}: the entry does not exist")
    return plan


# ---- the request -------------------------------------------------------------------------------------

SYSTEM = f"""You refine the continual harness of prime-ci, an autonomous coding agent that works unattended on \
one repository in CI. The harness is what later runs on this repository start with: prompt notes and \
memories are added to their system prompt in full; skills (SKILL.md procedures) and subagents (role \
prompts for child agents) are listed by name and description.

Review the session below and decide what durable knowledge would have made this run faster or more \
reliable: facts that took effort to find, commands that work, pitfalls, conventions, procedures worth \
reusing. Fix or delete entries that the session shows to be wrong or stale. Keep entries short, specific \
and verified by the session. Never store secrets, and never copy untrusted PR or issue text verbatim.

Call the tool submit_refinement exactly once. Rules (a plan that breaks one is rejected as a whole):
- at most {MAX_OPS} operations; each content and each evidence at most {MAX_CHARS} characters;
- each op's evidence cites the ids of the session entries it is based on: the 8-hex ids shown as [id];
- create only names that do not exist yet; update and delete only existing entries; an update replaces \
the whole content;
- kinds: prompt, memory, skill, subagent; names are 1-64 of a-z 0-9 . _ - starting with a letter or digit;
- content is markdown and may start with a '---' frontmatter block holding `description:` (and `model:` \
for a subagent); other keys are set by prime-ci;
- the base system prompt is fixed and is never a target."""


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]}\n[... {len(text) - limit} characters elided ...]\n{text[len(text) - (limit - head):]}"


def _parts(content: Any, clip: int) -> str:
    if isinstance(content, str):
        return _clip(content, clip)
    out: list[str] = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            out.append(_clip(str(part.get("text", "")), clip))
        elif kind == "toolCall":
            args = part.get("arguments")
            code = args.get("code") if isinstance(args, dict) else None
            shown = code if isinstance(code, str) else json.dumps(args, ensure_ascii=False)
            out.append(f"<{part.get('name', 'tool')} call>\n{_clip(shown, clip)}")
    return "\n".join(out)


def _entry_text(entry: dict[str, Any]) -> str | None:
    eid, kind = entry.get("id", "?"), entry.get("type")
    if kind == "message":
        msg = entry.get("message") or {}
        role = msg.get("role", "?")
        if role == "bashExecution":  # Prime Agent's `!cmd`: a shell command the user ran, and its output
            return f"[{eid}] shell: $ {msg.get('command', '')}\n{_clip(str(msg.get('output', '')), TOOL_CLIP)}"
        clip = TOOL_CLIP if role == "toolResult" else 4000
        return f"[{eid}] {role}: {_parts(msg.get('content', msg.get('summary')), clip)}"
    if kind == "custom_message":
        return f"[{eid}] {entry.get('customType', 'message')}: {_clip(str(entry.get('content', '')), TOOL_CLIP)}"
    if kind == "custom":
        data = json.dumps(entry.get("data"), ensure_ascii=False)
        return f"[{eid}] ({entry.get('customType', 'custom')}) {_clip(data, 600)}"
    if kind in ("compaction", "branch_summary"):
        what = "compaction" if kind == "compaction" else "abandoned branch"
        return f"[{eid}] {what} summary: {_clip(str(entry.get('summary', '')), 4000)}"
    if kind == "model_change":
        return f"[{eid}] (model {entry.get('modelId', '?')})"
    return None


def condense(session: SessionFile, limit: int = TRAJECTORY_LIMIT) -> str:
    """The session's active branch as text, every entry with its id; the most recent entries are kept within
    ``limit``. Branches abandoned in the session tree (Prime Agent's ``/tree``) are left out."""
    blocks = [text for entry in session.active_path() if (text := _entry_text(entry)) is not None]
    kept: list[str] = []
    used = 0
    for block in reversed(blocks):
        if used + len(block) + 2 > limit:
            break
        kept.append(block)
        used += len(block) + 2
    kept.reverse()
    dropped = len(blocks) - len(kept)
    return (f"[{dropped} earlier entries omitted]\n\n" if dropped else "") + "\n\n".join(kept)


def _state(store: HarnessStore) -> str:
    lines: list[str] = []
    for e in store.list():
        if not e.trusted:  # untrusted text must not reach a trusted plan: only the name, until a review
            lines.append(f"### {e.kind}:{e.name} (untrusted: content withheld until reviewed)")
            continue
        head = f"### {e.kind}:{e.name} ({e.description})" + (f" model={e.model}" if e.model else "")
        lines.append(f"{head}\n{_clip(e.body.strip(), 2000)}")
    text = "\n\n".join(lines) or "(empty: no entries yet)"
    recent = store.history()[-10:]
    if recent:
        text += "\n\nRecent change sets:\n" + "\n".join(
            f"- {cs.id} ({cs.trigger}): {', '.join(f'{o.op} {o.target}' for o in cs.ops)}" for cs in recent)
    return _clip(text, STATE_LIMIT)


def build_request(store: HarnessStore, session: SessionFile, instructions: str | None) -> list[dict[str, Any]]:
    user = (f"# Harness state\n\n{_state(store)}\n\n# Session trajectory\n\n{condense(session)}\n\n"
            f"# Instructions\n\n{instructions.strip() if instructions else '(none: use your judgement)'}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


# ---- running one refinement --------------------------------------------------------------------------


@dataclass
class RefineOutcome:
    changeset: ChangeSet | None  # the applied change set, or None when rejected
    reason: str | None  # why the plan was rejected
    rejection_id: str | None  # its id in rejected.jsonl
    plan: Plan | None
    raw: str  # the submit_refinement arguments as the model produced them (or its text)
    usage: Usage
    cost_usd: float | None
    cost: Cost | None = None  # the call's cost by kind (None: the price is unknown)

    @property
    def applied(self) -> bool:
        return self.changeset is not None


def record_rejection(store: HarnessStore, reason: str, raw: str, *, source_run: str) -> str:
    rid = f"rj-{secrets.token_hex(4)}"
    with store.locked():
        durable.append_json(store.rejected_path, {"id": rid, "ts": now_iso(), "source_run": source_run,
                                                  "reason": reason, "raw": raw[:200_000]})
    return rid


def rejections(store: HarnessStore) -> list[dict[str, Any]]:
    return [data for _, data in read_jsonl(store.rejected_path) if isinstance(data, dict)]


def session_untrusted(session: SessionFile) -> bool:
    """Whether the run read untrusted input: a ``prime_ci.untrusted`` entry, or the run record says so."""
    for entry in session.entries:
        if entry.get("customType") == "prime_ci.untrusted":
            return True
        data = entry.get("data")
        if entry.get("customType") == "prime_ci.run" and isinstance(data, dict) and data.get("untrusted"):
            return True
    return False


def session_run_id(session: SessionFile, path: Path) -> str:
    run = session.last_custom("prime_ci.run") or {}
    return str(run.get("run_id") or session.header.get("id") or path.stem)


async def refine(
    model: Model, store: HarnessStore, session_path: Path, *, instructions: str | None, source_run: str,
    trust: str, budget: Budget | None = None, max_tokens: int = 8000, timeout: float = 300.0,
) -> RefineOutcome:
    """One model call with ``submit_refinement`` as the only tool; apply the plan or record the rejection.

    The call is metered on ``budget`` (a run's ledger; a fresh default one when refining alone): it raises
    ``BudgetExhausted``, and nothing is recorded, when the budget cannot fit it.
    """
    session = read_session(session_path)
    session_ids = {e["id"] for e in session.active_path() if isinstance(e.get("id"), str)}  # what condense shows
    meter = budget if budget is not None else Budget(Limits())
    reply = await meter.call(model, build_request(store, session, instructions), [REFINE_TOOL], turn=False,
                             max_tokens=max_tokens, timeout=timeout)
    calls = [c for c in reply.tool_calls if c.name == "submit_refinement"]
    raw = calls[0].arguments if calls else reply.text

    def rejected(reason: str, plan: Plan | None = None) -> RefineOutcome:
        rid = record_rejection(store, reason, raw, source_run=source_run)
        return RefineOutcome(None, reason, rid, plan, raw, reply.usage, reply.cost_usd, reply.cost)

    if not calls:
        return rejected("no plan submitted")
    if len(calls) > 1:
        return rejected(f"submit_refinement was called {len(calls)} times; exactly one plan is allowed")
    try:
        plan = validate_plan(raw, session_ids, store)
    except PlanRejected as exc:
        return rejected(exc.reason)
    changes = [Change(op.op, op.kind, op.name, op.content, op.evidence) for op in plan.ops]
    try:
        cs = store.apply(changes, source_run=source_run, trigger="refine", rationale=plan.rationale, trust=trust)
    except HarnessCorrupt:
        raise
    except HarnessError as exc:
        return rejected(str(exc), plan)
    return RefineOutcome(cs, None, None, plan, raw, reply.usage, reply.cost_usd, reply.cost)
