"""Issue 3 acceptance, the part about processes: gates killed at their timeout leave no survivor, and the
``gates`` command's exit code (the rest is in process: tests/runs/gates/test_gate_runs.py)."""

from __future__ import annotations

import random
from pathlib import Path

from junitparser import JUnitXml

from conftest import live_processes_with, run_prime
from prime_ci.testing import ScriptedServer, reply


def test_stubborn_gates_killed_at_timeout_no_survivors(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    m1, m2 = f"{random.randint(10**5, 10**6)}.5", f"{random.randint(10**5, 10**6)}.7"
    gates = tmp_path / "gates.toml"
    gates.write_text(
        f'[[gate]]\nname = "ignores-term"\ncommand = "trap \'\' TERM; sleep {m1}; true"\ntimeout = "2s"\n\n'
        f'[[gate]]\nname = "escapee"\ncommand = "setsid sleep {m2} & sleep {m2}"\ntimeout = "2s"\n'
    )
    server.add(reply("done"))
    run = run_prime(tmp_path, buggy_repo, server, "--gates-file", str(gates), "--max-gate-retries", "0")
    assert run.code == 1
    assert [g["timed_out"] for g in run.result["gates"]] == [True, True]
    assert live_processes_with(f"sleep\x00{m1}") == [] and live_processes_with(f"sleep\x00{m2}") == []


def test_gates_command_alone(tmp_path: Path, buggy_repo: Path) -> None:
    from conftest import run_cli

    junit = tmp_path / "g.xml"
    proc = run_cli(["gates", "--gate", "python -m pytest -q", "--gate", "true", "--junit", str(junit),
                    "--logs", str(tmp_path / "logs")], cwd=buggy_repo)
    assert proc.returncode == 1
    assert "gate pytest: FAIL" in proc.stderr and "gate true: pass" in proc.stderr
    assert "test_add" in (tmp_path / "logs" / "pytest.log").read_text()
    assert len(list(JUnitXml.fromfile(str(junit)))) >= 1
