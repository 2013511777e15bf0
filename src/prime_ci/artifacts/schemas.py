"""JSON Schemas of prime-ci's machine-readable outputs (``prime-ci schema``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from prime_ci.gates.runner import GateSpec
from prime_ci.harness.refine import plan_schema


class UsageModel(BaseModel):
    turns: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(description="null when the provider's prices are unknown")


class BudgetsModel(BaseModel):
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


StopReason = Literal[
    "completed", "gates_failed", "max_turns", "max_tokens", "max_wall", "max_cost", "model_error",
    "sandbox_unavailable", "persistence_error", "security_stop", "no_changes", "setup_failed", "internal_error",
    "interrupted",
]


class ResultModel(BaseModel):
    """result.json"""

    model_config = ConfigDict(extra="allow")
    version: int
    run_id: str
    stop_reason: StopReason
    exit_code: int
    success: bool
    task: str
    model: str
    base_commit: str
    wall_s: float
    usage: UsageModel
    budgets: BudgetsModel
    gates: list[GateEntry]
    rounds: list[RoundEntry] = Field(default_factory=list)
    children: list[ChildEntry]
    changed_files: list[str]
    flags: list[str]


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


class GateFile(BaseModel):
    gate: list[GateSpec]


def schemas() -> dict[str, Any]:
    return {
        "result": ResultModel.model_json_schema(),
        "session": {"header": SessionHeader.model_json_schema(), "entry": SessionEntry.model_json_schema()},
        "gates": GateFile.model_json_schema(),
        "refine": plan_schema(),
    }
