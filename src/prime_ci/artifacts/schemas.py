"""JSON Schemas of prime-ci's machine-readable outputs (``prime-ci schema``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator

from prime_ci.gates.specs import SetupEntry
from prime_ci.stops import StopReason

_CRC = r"^[0-9a-f]{8}$"


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
    """One gate run of a round: ``fast`` reruns only the previously failing tests, ``full`` every gate; ``build``:
    a build failed before the gates (``gates`` names it) and they did not run."""

    model_config = ConfigDict(extra="allow")
    round: int
    kind: Literal["fast", "full", "build"]
    duration_s: float
    passed: bool
    gates: list[str]
    tests: int | None = Field(default=None, description="fast runs: how many previously failing tests were rerun")
    at_s: float | None = Field(default=None, description="seconds into the run when the round's run ended")


class ChildEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    status: str
    session: str


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
    build: list[SetupEntry] = Field(default_factory=list, description="the builds of the last round that ran them "
                                    "(--build, [[build]]), in order, up to the first failure; logs in build/")
    rounds: list[RoundEntry] = Field(default_factory=list)
    time_to_green_s: float | None = Field(default=None, description="seconds from the run's start to the end of "
                                          "its first gate round that passed in full; null when none did")
    dirty: list[str] = Field(default_factory=list, description="REPO's uncommitted paths when the run started "
                             "(the first 50; environments and build trees such as a venv or node_modules are "
                             "not counted)")
    dirty_count: int | None = Field(default=None, description="how many uncommitted paths REPO had in all")
    snapshot_of: str | None = Field(default=None, description="--include-dirty: the commit the snapshot was taken on")
    out_dir: str | None = None
    worktree: str | None = Field(default=None, description="the kept worktree (--keep-worktree)")
    context_window: int = Field(default=0, description="the context window the run used, in tokens (the "
                                "server's /models, litellm's table, --context-window or a default; lowered when "
                                "the provider refused a prompt as too long); absent when the run ended before the "
                                "window was looked up")


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
    """The first line of session.jsonl (Prime Agent's format; version-1 files have no ``version``)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["session"]
    version: int | None = Field(None, description="3; absent in version-1 files")
    id: str
    timestamp: str
    cwd: str
    parentSession: str | None = Field(None, description="the session this one was forked or spawned from")
    rlmDepth: int | None = None
    git: dict[str, Any] | None = None
    seq: int | None = Field(None, description="prime-ci: 0")
    crc32: str | None = Field(None, pattern=_CRC, description="prime-ci: present on every line of a file it wrote")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    id: str = Field(min_length=1, description="8 hex digits (longer after an id collision)")
    parentId: str | None = Field(description="null for a root; entries form a tree, the last one is the leaf")
    timestamp: str
    seq: int | None = Field(None, description="prime-ci: the line's number (header 0)")
    crc32: str | None = Field(None, pattern=_CRC, description="prime-ci: checksum (absent from other writers)")


class AgentMessage(BaseModel):
    """user, assistant, toolResult, bashExecution, custom, branchSummary, compactionSummary, or an extension's."""

    model_config = ConfigDict(extra="allow")
    role: str


class MessageEntry(_Entry):
    type: Literal["message"]
    message: AgentMessage


class ModelChangeEntry(_Entry):
    type: Literal["model_change"]
    provider: str
    modelId: str


class ThinkingLevelChangeEntry(_Entry):
    type: Literal["thinking_level_change"]
    thinkingLevel: str


class ServiceTierChangeEntry(_Entry):
    type: Literal["service_tier_change"]
    serviceTier: str


class CompactionEntry(_Entry):
    type: Literal["compaction"]
    summary: str
    firstKeptEntryId: str | None = None
    tokensBefore: int | None = None


class BranchSummaryEntry(_Entry):
    type: Literal["branch_summary"]
    fromId: str
    summary: str


class CustomEntry(_Entry):
    type: Literal["custom"]
    customType: str


class CustomMessageEntry(_Entry):
    type: Literal["custom_message"]
    customType: str
    content: str | list[Any]
    display: bool | None = None


class ChildUsageEntry(_Entry):
    type: Literal["child_usage_attributed"]
    targetId: str
    childUsage: dict[str, Any] | None = None
    aggregateUsage: dict[str, Any] | None = None


class LabelEntry(_Entry):
    type: Literal["label"]
    targetId: str
    label: str | None = Field(None, description="absent to clear the label")


class SessionInfoEntry(_Entry):
    type: Literal["session_info"]
    name: str | None = None


class SessionStateEntry(_Entry):
    type: Literal["session_state"]
    state: dict[str, Any]


class AgentStatusEntry(_Entry):
    type: Literal["agent_status"]
    status: dict[str, Any]


class GitStateEntry(_Entry):
    type: Literal["git_state"]
    git: dict[str, Any]


_KNOWN_ENTRIES: tuple[type[_Entry], ...] = (
    MessageEntry, ModelChangeEntry, ThinkingLevelChangeEntry, ServiceTierChangeEntry, CompactionEntry,
    BranchSummaryEntry, CustomEntry, CustomMessageEntry, ChildUsageEntry, LabelEntry, SessionInfoEntry,
    SessionStateEntry, AgentStatusEntry, GitStateEntry,
)
KNOWN_ENTRY_TYPES = tuple(str(m.model_fields["type"].annotation.__args__[0]) for m in _KNOWN_ENTRIES)  # type: ignore[union-attr]


class OtherEntry(_Entry):
    """An entry type this schema does not know (a later Prime Agent's, an extension's): only the tree fields."""

    type: str = Field(json_schema_extra={"not": {"enum": list(KNOWN_ENTRY_TYPES)}})

    @field_validator("type")
    @classmethod
    def _unknown(cls, value: str) -> str:
        if value in KNOWN_ENTRY_TYPES:
            raise ValueError(f"a {value!r} entry lacks or misspells a field of its type")
        return value


class SessionEntry(RootModel[
    MessageEntry | ModelChangeEntry | ThinkingLevelChangeEntry | ServiceTierChangeEntry | CompactionEntry
    | BranchSummaryEntry | CustomEntry | CustomMessageEntry | ChildUsageEntry | LabelEntry | SessionInfoEntry
    | SessionStateEntry | AgentStatusEntry | GitStateEntry | OtherEntry
]):
    """One entry line of session.jsonl after the header: a known Prime Agent entry type, or any other type with
    the tree fields (``id``, ``parentId``, ``timestamp``)."""


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
