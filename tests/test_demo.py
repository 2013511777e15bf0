"""Issue 2 acceptance 7: the demo runs offline, and the wheel carries everything it needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_demo_exits_zero_offline(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "no_proxy": "*", "HTTPS_PROXY": "http://127.0.0.1:9"}
    proc = run_cli(["demo", "--out", str(tmp_path / "out"), "--json"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stop_reason"] == "completed" and result["changed_files"] == ["calc.py"]
    session = (tmp_path / "out" / "session.jsonl").read_text()
    assert "prime_ci.gate_feedback" in session, "the demo should show a failing gate fed back"
    assert "test_add" in session
    # every round is said on the console, the failing one and the passing one
    assert "gate pytest: FAIL" in proc.stderr and "gate pytest: pass" in proc.stderr, proc.stderr


def test_wheel_contains_package_data_and_runs_demo(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("prime_ci-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("prime_ci/prompts/system.md", "prime_ci/demo/session.jsonl", "prime_ci/demo/repo/calc.py",
                   "prime_ci/demo/repo/gitignore", "prime_ci/kernel/api/__init__.py", "prime_ci/py.typed",
                   "prime_ci/isolation/project_layer.py", "prime_ci/cli/__init__.py", "prime_ci/testing/__main__.py"):
        assert needed in names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    proc = subprocess.run([sys.executable, "-m", "prime_ci", "demo", "--out", str(tmp_path / "out")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["success"] is True
