"""Issue 37: ``prime-ci report`` reads each run's result.json only from inside its directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prime_ci.artifacts.multireport import load_result
from prime_ci.errors import ConfigError


def test_a_result_json_that_leads_out_of_the_run_directory_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "shard"
    run.mkdir()
    outside = tmp_path / "private.json"
    outside.write_text(json.dumps({"exit_code": 0}))
    (run / "result.json").symlink_to(outside)
    with pytest.raises(ConfigError, match=rf"^report: {run / 'result.json'} leads out of {run} .*: refused$"):
        load_result(run)


def test_a_result_json_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    run = tmp_path / "shard"
    run.mkdir()
    os.mkfifo(run / "result.json")
    with pytest.raises(ConfigError, match="is not a regular file: refused"):
        load_result(run)
