"""Issue 23: a gate that times out (a real process killed at its timeout) says so in its log and feedback."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from prime_ci.gates.runner import GateSpec, feedback_message, run_gate
from prime_ci.isolation.limits import Limits


def test_a_timed_out_gate_says_so_in_its_log_and_feedback(tmp_path: Path) -> None:
    spec = GateSpec(name="slow", command="echo started; exec sleep 300", timeout=1)
    result = asyncio.run(run_gate(spec, cwd=tmp_path, env={"PATH": os.environ["PATH"]}, log_dir=tmp_path / "logs",
                                  limits=Limits(), kill_grace=0.5))
    assert result.timed_out and result.exit_code is None
    assert "[prime-ci] stopped: timed out after 1s (the gate's timeout)" in result.log_path.read_text()
    assert "## gate slow: timed out after 1s" in feedback_message([result])
    assert "exit None" not in feedback_message([result])
