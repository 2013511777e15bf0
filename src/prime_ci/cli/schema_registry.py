"""Every JSON Schema ``prime-ci schema`` prints, by name: gathered here, at the top, because they come from
every layer (artifacts, gates, harness, bench)."""

from __future__ import annotations

from typing import Any

from prime_ci.artifacts.schemas import AssistantUsage, ResultModel, SessionEntry, SessionHeader
from prime_ci.bench.model import bench_schema
from prime_ci.bench.suite import Task
from prime_ci.gates.specs import GateFile
from prime_ci.harness.refine import plan_schema


def schemas() -> dict[str, Any]:
    return {
        "result": ResultModel.model_json_schema(),
        "session": {"header": SessionHeader.model_json_schema(), "entry": SessionEntry.model_json_schema(),
                    "usage": AssistantUsage.model_json_schema()},
        "gates": GateFile.model_json_schema(),
        "refine": plan_schema(),
        "bench": bench_schema(),
        "suite": Task.model_json_schema(),
    }
