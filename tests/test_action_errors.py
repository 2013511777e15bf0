"""Issue 39, every error reaches the person: a run of the action that ends in an error (a configuration error, a
sandbox that cannot start, a failed setup, an internal error) gives its one-line reason as the step's ``error``
output, in the step summary and in the ``::error`` the action fails with (the publish step puts it in the pull
request comment: test_pr_comment.py). The run step's scripts run as the composite runs them: the real prime-ci where
that is cheap (a usage error), else a stand-in that writes the artifacts a run ending in that error leaves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PRIME_CI, job_bin

ROOT = Path(__file__).resolve().parents[1]


def job_env(tmp: Path) -> dict[str, str]:
    """A runner's environment: ``python3`` on PATH sees what the tests' interpreter sees (pytest)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRIME_CI_", "INPUT_", "GITHUB_", "GH_"))}
    runner_bin = job_bin(tmp)
    (tmp / "home").mkdir(exist_ok=True)
    env.update(HOME=str(tmp / "home"), PATH=f"{runner_bin}{os.pathsep}{env.get('PATH', '')}")
    return env


FAKE_PRIME_CI = """#!{python}
import json, sys
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--out") + 1])
print("prime-ci: kernel ready", file=sys.stderr)
result = {{"run_id": "r9", "stop_reason": "{reason}", "exit_code": {code}, "success": False, "detail": "{detail}",
          "usage": {{"turns": 0, "total_tokens": 0, "cost_usd": None}}, "changed_files": []}}
(out / "result.json").write_text(json.dumps(result))
(out / "summary.md").write_text("## prime-ci: `{reason}` (exit {code})\\n\\n> {detail}\\n")
sys.exit({code})
"""


def run_step(tmp: Path, bin_: str, **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    (tmp / "output").write_text("")
    (tmp / "summary").write_text("")
    env = {**job_env(tmp), "GITHUB_OUTPUT": str(tmp / "output"), "GITHUB_STEP_SUMMARY": str(tmp / "summary"),
           "GITHUB_ACTIONS": "true", "RUNNER_TEMP": str(tmp), "PRIME_CI_BIN": bin_, "PRIME_CI_PYTHON": sys.executable,
           "GATE_ALLOWED": "true", "INPUT_TASK": "t", "INPUT_REPO": str(tmp), "INPUT_EVENT_TEXT": "false",
           **inputs}  # fmt: skip
    proc = subprocess.run(["bash", str(ROOT / "action" / "run.sh")], cwd=tmp, env=env, capture_output=True, text=True)
    outputs = dict(line.split("=", 1) for line in (tmp / "output").read_text().splitlines() if "=" in line)
    return proc, outputs, (tmp / "summary").read_text()


def finish(tmp: Path, outputs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**job_env(tmp), "EXIT_CODE": outputs["exit-code"], "STOP_REASON": outputs.get("stop-reason", ""),
           "RUN_ERROR": outputs.get("error", "")}  # fmt: skip
    return subprocess.run(["bash", str(ROOT / "action" / "finish.sh")], env=env, capture_output=True, text=True)


def test_a_usage_error_reaches_the_error_output_the_summary_and_the_annotation(tmp_path: Path) -> None:
    proc, outputs, summary = run_step(tmp_path, PRIME_CI, INPUT_SANDBOX="sometimes", INPUT_MODEL="replay:x.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert outputs["exit-code"] == "2"
    assert outputs["error"].startswith("Invalid value for '--sandbox': 'sometimes' is not one of")
    assert summary.startswith("## ❌ prime-ci: configuration error (exit 2)\n\n> `Invalid value for '--sandbox'")
    assert "prime-ci: error: Invalid value" in proc.stderr, "prime-ci's own line still reaches the log"
    done = finish(tmp_path, outputs)
    assert done.returncode == 2
    assert done.stdout.startswith("::error title=prime-ci::prime-ci exited 2: Invalid value for '--sandbox'")


@pytest.mark.parametrize(("reason", "code", "detail"), [
    ("sandbox_unavailable", 5, "bwrap: setting up uid map: Permission denied; set sandbox: auto"),
    ("setup_failed", 9, "setup `pip` exited 1"),
    ("internal_error", 70, "KeyError: 'x'"),
])  # fmt: skip
def test_a_run_that_ends_in_error_reports_its_detail(tmp_path: Path, reason: str, code: int, detail: str) -> None:
    fake = tmp_path / "prime-ci"
    fake.write_text(FAKE_PRIME_CI.format(python=sys.executable, reason=reason, code=code, detail=detail))
    fake.chmod(0o755)
    proc, outputs, summary = run_step(tmp_path, str(fake))
    assert proc.returncode == 0, proc.stderr
    assert (outputs["exit-code"], outputs["error"]) == (str(code), detail)
    assert f"> {detail}" in summary
    done = finish(tmp_path, outputs)
    assert done.returncode == code
    [error] = [line for line in done.stdout.splitlines() if line.startswith("::error")]
    assert error.startswith(f"::error title=prime-ci::prime-ci exited {code} ({reason}): {detail}")


def test_an_error_without_artifacts_is_prime_cis_last_error_line(tmp_path: Path) -> None:
    helper_path = ROOT / "action" / "helper.py"
    log = tmp_path / "stderr"
    log.write_text("prime-ci: run r1\nprime-ci: error: first\nTraceback\n"
                   "prime-ci: error: the \x1b[31mlast\x1b[0m one\n")
    reason = subprocess.run([sys.executable, str(helper_path), "reason", "5", str(tmp_path / "no-out"), str(log)],
                            capture_output=True, text=True).stdout  # fmt: skip
    assert reason == "the last one\n"
    log.write_text("Traceback (most recent call last):\n  ...\nValueError: boom\n")
    crash = subprocess.run([sys.executable, str(helper_path), "reason", "1", str(tmp_path / "no-out"), str(log)],
                           capture_output=True, text=True).stdout  # fmt: skip
    assert crash == "ValueError: boom\n"
