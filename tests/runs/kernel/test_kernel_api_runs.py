"""Issue 3: goal.get/complete, gates.run inside a turn, budget notes at 50/80/95%."""

from __future__ import annotations

from pathlib import Path

from conftest import FIX, PYTEST_GATE, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply


def _tool_output(server: ScriptedServer, index: int) -> str:
    return str(server.chat_requests[index].body["messages"][-1]["content"])


def test_goal_and_on_demand_gates(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(
        ipython("g = await goal.get()\nprint(g['objective'], g['status'], g['gates'])"),
        ipython("r = await gates.run('pytest')\nprint('RUN', [(x.name, x.passed) for x in r])"),
        ipython(FIX + "print(await goal.complete('fixed add'))"),
        reply("unreachable: the goal completion ends the turn"),
    )
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", PYTEST_GATE)
    assert run.code == 0, run.proc.stderr
    assert "Fix the failing test. active ['pytest']" in _tool_output(server, 1)
    assert "RUN [('pytest', False)]" in _tool_output(server, 2)
    assert len(server.chat_requests) == 3, "goal.complete() should end the turn and let the gates decide"
    session = (run.out / "session.jsonl").read_text()
    assert '"on_demand":true' in session and "prime_ci.goal" in session


def test_goal_complete_does_not_override_failing_gates(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.add(ipython("await goal.complete('all done, trust me')"), reply("really done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", PYTEST_GATE, "--max-gate-retries", "0")
    assert run.code == 1 and run.result["stop_reason"] == "gates_failed"


def test_budget_notes_at_50_80_95_percent(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(*[ipython("pass") for _ in range(20)])
    run = run_inproc(tmp_path, buggy_repo, server, "--max-turns", "20")
    assert run.code == 3
    notes = [m["content"] for m in server.chat_requests[-1].body["messages"]
             if m["role"] == "user" and str(m["content"]).startswith("[budget]")]
    assert notes == ["[budget] 50% of the turns budget used (10/20 turns).",
                     "[budget] 80% of the turns budget used (16/20 turns).",
                     "[budget] 95% of the turns budget used (19/20 turns)."]
