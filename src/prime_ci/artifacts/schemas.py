"""JSON Schemas of prime-ci's machine-readable outputs (``prime-ci schema``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from prime_ci.engine.stops import StopReason
from prime_ci.gates.runner import GateSpec
from prime_ci.harness.refine import plan_schema


class UsageModel(BaseModel):
    model_config = ConfigDict(extra="allow")
    turns: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cache_read_tokens: int = Field(0, description="prompt tokens served from the provider's prompt cache")
    cache_write_tokens: int = Field(0, description="prompt tokens written to the provider's prompt cache")
    reasoning_tokens: int = Field(0, description="completion tokens the model spent reasoning")
    abandoned_calls: int = Field(0, description="calls given up at the wall limit, charged at their estimate")
    cost_usd: float | None = Field(description="null when the provider's prices are unknown")


class BudgetsModel(BaseModel):
    model_config = ConfigDict(extra="allow")
    max_turns: int
    max_tokens: int
    max_wall_s: float
    max_cost_usd: float | None


class GateEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    command: str
    passed: bool
    exit_code: int | None
    duration_s: float
    attempts: int
    flaky: bool


class RoundEntry(BaseModel):
    """One gate run of a round: ``fast`` reruns only the previously failing tests, ``full`` every gate."""

    model_config = ConfigDict(extra="allow")
    round: int
    kind: Literal["fast", "full"]
    duration_s: float
    passed: bool
    gates: list[str]
    tests: int | None = Field(default=None, description="fast runs: how many previously failing tests were rerun")


class ChildEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    status: str
    session: str


class SetupEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    log: str


class ResultModel(BaseModel):
    """result.json: the run writes it through this model (``result_json``), so the schema is what is written."""

    model_config = ConfigDict(extra="allow")
    version: int
    run_id: str
    stop_reason: StopReason
    exit_code: int
    success: bool
    detail: str = ""
    task: str
    model: str
    base_commit: str
    wall_s: float
    usage: UsageModel
    budgets: BudgetsModel
    gates: list[GateEntry]
    children: list[ChildEntry]
    changed_files: list[str]
    flags: list[str]
    sandbox: str = "off"
    python: str | None = None
    setup: list[SetupEntry] = Field(default_factory=list)
    rounds: list[RoundEntry] = Field(default_factory=list)
    dirty: list[str] = Field(default_factory=list, description="REPO's uncommitted paths when the run started")
    snapshot_of: str | None = Field(default=None, description="--include-dirty: the commit the snapshot was taken on")
    out_dir: str | None = None
    worktree: str | None = Field(default=None, description="the kept worktree (--keep-worktree)")


def result_json(**fields: Any) -> dict[str, Any]:
    """result.json's content, validated by ``ResultModel``; keys the caller did not give stay out, and the keys
    keep the caller's order (pydantic puts declared fields before extra ones)."""
    data: dict[str, Any] = _in_order(ResultModel(**fields).model_dump(mode="json", exclude_unset=True), fields)
    return data


def _in_order(dumped: Any, given: Any) -> Any:
    if isinstance(dumped, dict) and isinstance(given, dict):
        keys = [k for k in given if k in dumped] + [k for k in dumped if k not in given]
        return {k: _in_order(dumped[k], given.get(k)) for k in keys}
    if isinstance(dumped, list) and isinstance(given, list) and len(dumped) == len(given):
        return [_in_order(d, g) for d, g in zip(dumped, given, strict=True)]
    return dumped


class SessionHeader(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["session"]
    version: Literal[3]
    id: str
    timestamp: str
    cwd: str
    parentSession: str | None = None
    rlmDepth: int | None = None


class SessionEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["message", "model_change", "compaction", "custom", "custom_message", "child_usage_attributed"]
    id: str = Field(pattern=r"^[0-9a-f]{8}$")
    parentId: str | None
    timestamp: str


class CostSplit(BaseModel):
    input: float
    output: float
    cacheRead: float
    cacheWrite: float
    total: float


class AssistantUsage(BaseModel):
    """An assistant message's ``usage`` (Prime Agent's shape): ``input`` excludes cached tokens; the cost is
    zeros when the price is unknown."""

    model_config = ConfigDict(extra="allow")
    input: int
    output: int
    cacheRead: int
    cacheWrite: int
    totalTokens: int
    cost: CostSplit


class GateFile(BaseModel):
    gate: list[GateSpec]


def schemas() -> dict[str, Any]:
    return {
        "result": ResultModel.model_json_schema(),
        "session": {"header": SessionHeader.model_json_schema(), "entry": SessionEntry.model_json_schema(),
                    "usage": AssistantUsage.model_json_schema()},
        "gates": GateFile.model_json_schema(),
        "refine": plan_schema(),
    }
