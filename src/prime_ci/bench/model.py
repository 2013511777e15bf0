"""bench.json: the report of one bench (or of merged shards), as pydantic models; ``prime-ci schema bench``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

VERSION = 1


class HiddenCheck(BaseModel):
    """The suite's hidden tests, run by the bench on base + the run's patch + the test patch."""

    model_config = ConfigDict(extra="forbid")
    passed: bool
    command: str
    exit_code: int | None
    failing: list[str] = Field(default_factory=list, description="test ids that failed (or were not found)")
    log: str = Field(description="the check's output, relative to bench.json's directory")
    duration_s: float
    error: str | None = Field(None, description="why the check could not judge (e.g. a test id not found, no "
                              "pytest): no verdict on the patch; the task runs again when the bench is run again")


class TaskResult(BaseModel):
    """One run of one task under one harness (one repeat)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="the task's id in the suite")
    index: int = Field(0, description="the task's position in the suite (report order)")
    fingerprint: str = Field("", description="hash of the task's definition and the files it names: a bench run "
                             "again reruns a task whose fingerprint changed")
    harness: str = Field(description="label of the harness state the run used ('default' when none was given)")
    repeat: int = Field(description="0-based repeat index (--repeat)")
    seed: int = Field(description="the seed passed to the run (--seed); providers that take one get it")
    solved: bool = Field(description="the bench's verdict: the run's gates passed in its final round and the "
                         "hidden tests (if any) passed; never the model's claim")
    stop_reason: str = Field(description="the run's stop reason (result.json), or 'bench_error'")
    exit_code: int | None
    cost_usd: float | None
    total_tokens: int
    turns: int
    wall_s: float = Field(description="the run's wall clock (result.json)")
    process_s: float | None = Field(None, description="the run's process from start to exit as the bench saw it "
                                    "(interpreter start and clone included)")
    time_to_green_s: float | None = Field(description="seconds from the run's start to its first passing gate "
                                          "round; null when the gates never passed")
    run_dir: str = Field(description="the run's artifacts, relative to bench.json's directory")
    gates_passed: bool | None = Field(description="the run's gates in its final round; null without gates")
    hidden: HiddenCheck | None = None
    detail: str | None = None


class Interval(BaseModel):
    model_config = ConfigDict(extra="forbid")
    low: float
    high: float
    level: float = 0.95
    method: str


class Summary(BaseModel):
    """Totals over the task results of one harness."""

    model_config = ConfigDict(extra="forbid")
    harness: str
    source: str = Field(description="where the harness state came from: a directory, a branch, or 'none'")
    runs: int
    solved: int
    solve_rate: float
    interval: Interval
    cost_usd: float | None = Field(description="sum; null when any run's price was unknown")
    total_tokens: int
    turns: int
    wall_s: float
    median_time_to_green_s: float | None
    by_stop_reason: dict[str, list[str]] = Field(description="stop reason -> the run keys that ended with it")


class Flip(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    repeat: int
    baseline: bool
    candidate: bool


class Comparison(BaseModel):
    """Paired A/B of the first (baseline) and last (candidate) harness on the same tasks and seeds."""

    model_config = ConfigDict(extra="forbid")
    baseline: str
    candidate: str
    pairs: int
    difference: float = Field(description="candidate solve rate minus baseline solve rate, over the pairs")
    interval: Interval = Field(description="paired bootstrap interval of the difference")
    p_value: float = Field(description="exact McNemar test on the discordant pairs (1.0 when there are none)")
    test: str
    flips: list[Flip]
    cost_difference_usd: float | None
    tokens_difference: int
    wall_difference_s: float


class ThresholdCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    limit: float
    value: float
    passed: bool


class SuiteInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    path: str
    sha256: str = Field(description="of the suite file's bytes: shards and resumed benches must match it")
    tasks: int = Field(description="tasks in the whole suite (before sharding)")


class BenchReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = VERSION
    suite: SuiteInfo
    model: str | None = Field(description="--model, or null when each task's recorded session was replayed")
    recorded: bool = Field(description="true when the numbers come from replayed recorded sessions, not a live "
                           "model")
    repeat: int
    shard: str | None = Field(description="'i/N' for one shard; null for a whole or merged bench")
    merged_from: list[str] = Field(default_factory=list)
    solve_rate: float = Field(description="the candidate's (the last --harness) solve rate")
    solve_rate_interval: Interval
    harnesses: list[Summary]
    comparison: Comparison | None
    thresholds: list[ThresholdCheck] = Field(default_factory=list)
    tasks: list[TaskResult]
    wall_s: float = Field(description="the bench's own wall clock (sum over merged shards)")


def bench_schema() -> dict[str, Any]:
    return BenchReport.model_json_schema()
