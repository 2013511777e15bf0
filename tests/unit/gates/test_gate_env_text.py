"""Gates see the project's CI environment (no colour variables of prime-ci's), their logs and feedback carry
no terminal sequences, and a timeout is said as one (issue 23; the gate that times out is in
tests/runs/gates/test_gate_timeout_text.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from prime_ci.gates.runner import GateSpec, feedback_message, run_gate
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.sandbox import NO_COLOR_ENV, colour_off, scrubbed_env

COLOUR_VARS = ("NO_COLOR", "FORCE_COLOR", "CLICOLOR", "PY_COLORS")
# a gate that prints colours, a progress bar redrawn with \r, a title, then its environment
PRINTS_COLOUR = (r"printf '\033[1;31mFAIL\033[0m test_x \033]0;title\007\n'; "
                 r"printf '\r 10%%\r\033[2K100%%\n'; env | sort; exit 1")


def test_gates_get_no_colour_variables_and_the_kernel_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in COLOUR_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FORCE_COLOR", "3")
    gate_env = scrubbed_env(tmp_path / "home")
    assert not set(COLOUR_VARS) & set(gate_env)
    kernel = colour_off(gate_env)
    assert {k: kernel[k] for k in NO_COLOR_ENV} == NO_COLOR_ENV and "FORCE_COLOR" not in kernel
    passed = colour_off(scrubbed_env(tmp_path / "home", ["FORCE_COLOR", "NO_COLOR"]), ["FORCE_COLOR", "NO_COLOR"])
    assert passed["FORCE_COLOR"] == "3" and passed["NO_COLOR"] == "1", "--pass-env keeps the job's, if it has one"


def test_a_gate_printing_colour_yields_clean_logs_and_feedback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in COLOUR_VARS:
        monkeypatch.delenv(name, raising=False)
    env = scrubbed_env(tmp_path / "home")
    result = asyncio.run(run_gate(GateSpec(name="tests", command=PRINTS_COLOUR), cwd=tmp_path, env=env,
                                  log_dir=tmp_path / "logs", limits=Limits()))
    assert not result.passed
    log = result.log_path.read_bytes()
    feedback = feedback_message([result])
    assert "\x1b" not in feedback and "\x07" not in feedback and "\r" not in feedback
    for text in (log.decode(), result.output, feedback.split("output (head+tail):\n", 1)[1]):
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text, repr(text[:300])
        assert "FAIL test_x" in text and "100%" in text and " 10%" not in text and "title" not in text
        assert not [line for line in text.splitlines() if line.split("=")[0] in COLOUR_VARS]
    assert f"PATH={env['PATH']}" in log.decode()


def test_the_kernels_gate_result_says_timed_out() -> None:
    from prime_ci.kernel.api import GateRun

    run = GateRun(name="slow", command="sleep 9", passed=False, exit_code=None, output="", duration_s=1.0,
                  timed_out=True)
    assert repr(run) == "<gate slow TIMED OUT output=0 chars>"
