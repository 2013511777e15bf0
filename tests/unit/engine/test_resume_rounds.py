"""A resumed run keeps the gate rounds its session logged before the interruption: summary.md's table and the time
to green show the whole run, not only what came after the resume."""

from __future__ import annotations

from typing import Any

from prime_ci.artifacts.summary_parts import rounds_section
from prime_ci.engine.resume import rebuild
from prime_ci.session.read import SessionFile

HEADER = {"type": "session", "version": 3, "id": "s", "cwd": "/", "timestamp": "2026-01-01T00:00:00Z"}
FAILED = {"name": "tests", "passed": False, "failures": [{"test": "test_calc.py::test_add", "message": "assert -1 == 5",
                                                          "kind": "failure", "file": "test_calc.py", "line": 4}]}


def gate(n: int, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "custom", "id": f"{n:08x}", "parentId": None, "customType": "prime_ci.gate",
            "timestamp": "2026-01-01T00:00:01Z", "data": data}


def round_data(n: int, kind: str, passed: bool, **extra: Any) -> dict[str, Any]:
    return {"round": n, "kind": kind, "duration_s": 1.5, "passed": passed, "gates": ["tests"], "on_demand": False,
            "at_s": 10.0 * n, **extra}


def test_logged_rounds_come_back_with_what_failed_in_each() -> None:
    failing = [{"gate": "tests", "test": "test_calc.py::test_add", "message": "assert -1 == 5", "file": "test_calc.py",
                "line": 4}]
    entries = [
        gate(1, round_data(1, "full", False, failing=failing, results=[FAILED])),
        gate(2, {"round": 1, "skipped": "workspace unchanged"}),
        gate(3, round_data(2, "fast", False, tests=1, still_failing=["test_calc.py::test_add"], failing=failing,
                           results=[FAILED])),
        gate(4, round_data(2, "full", True, on_demand=True, failing=[], results=[])),
    ]
    state = rebuild(SessionFile(HEADER, entries))
    assert [(r["round"], r["kind"], r["passed"], r.get("on_demand")) for r in state.round_log] == [
        (1, "full", False, False), (2, "fast", False, False), (2, "full", True, True)]
    assert state.round_failing == [failing, failing, []]
    assert state.round_log[1]["tests"] == 1 and state.round_log[0]["at_s"] == 10.0
    assert (state.gate_rounds, state.failed_rounds) == (2, 3), "the retry count is as before"
    table = "\n".join(rounds_section({"rounds": state.round_log}, state.round_failing))
    assert "| 1 | full | ❌ red | `test_calc.py::test_add` | `assert -1 == 5` | 1.5s | 10s |" in table


def test_a_session_from_before_rounds_logged_their_failures_reads_them_from_the_results() -> None:
    state = rebuild(SessionFile(HEADER, [gate(1, round_data(1, "full", False, results=[FAILED]))]))
    assert state.round_failing == [[{"gate": "tests", "test": "test_calc.py::test_add", "message": "assert -1 == 5"}]]


def test_a_record_that_does_not_read_as_a_round_is_left_out_and_still_counted() -> None:
    entries = [gate(1, {"round": 1, "kind": "full", "passed": "maybe", "results": [FAILED]}),
               gate(2, round_data(2, "full", False, failing=[{"gate": 3}, "x", {"gate": "tests", "test": None,
                                                                               "message": "exit 1"}]))]
    state = rebuild(SessionFile(HEADER, entries))
    assert [r["round"] for r in state.round_log] == [2]
    assert state.round_failing == [[{"gate": "tests", "test": None, "message": "exit 1"}]]
    assert state.failed_rounds == 1 and state.gate_rounds == 2
