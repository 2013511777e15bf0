"""Issue 15, in process: a session's usage has Prime Agent's shape in the schema (the runs through the CLI, and
usage read from litellm's object, are in tests/runs/model/test_provider_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import cli_inproc


def test_session_usage_has_prime_agents_shape_in_the_schema(tmp_path: Path) -> None:
    proc = cli_inproc(["schema", "session"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    usage = json.loads(proc.stdout)["usage"]
    assert set(usage["required"]) == {"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"}
    result = json.loads(cli_inproc(["schema", "result"], cwd=tmp_path).stdout)
    assert {"cache_read_tokens", "cache_write_tokens", "reasoning_tokens"} <= set(
        result["$defs"]["UsageModel"]["properties"])
