"""Issue 2 acceptance 1, 2: the core loop in process (``run_inproc``: the CLI's entry point) and the scripted server."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import FIX, PYTEST_GATE, repo_state, run_inproc
from prime_ci.artifacts.schemas import ResultModel, SessionEntry, SessionHeader
from prime_ci.testing import ScriptedServer, ipython, reply


@pytest.mark.parametrize("route", ["direct", "litellm"])
def test_fixes_failing_test_and_writes_all_artifacts(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer, route: str
) -> None:
    before = repo_state(buggy_repo)
    server.add(ipython("print(open('calc.py').read())"), ipython(FIX), reply("Fixed add()."))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", PYTEST_GATE, env={"PRIME_CI_ROUTE": route})
    assert run.code == 0, run.proc.stderr
    result = ResultModel.model_validate(run.result)
    assert result.stop_reason == "completed" and result.success
    assert result.changed_files == ["calc.py"]
    assert [g.name for g in result.gates] == ["pytest"] and result.gates[0].passed
    assert repo_state(buggy_repo) == before, "the original repository was modified"

    lines = run.session()
    SessionHeader.model_validate(lines[0])
    for entry in lines[1:]:
        SessionEntry.model_validate(entry)
    assert lines[-1]["type"] == "custom" and lines[-1]["customType"] == "prime_ci.stop"
    assert lines[-1]["data"]["exit_code"] == 0

    assert "+    return a + b" in (run.out / "patch.diff").read_text()
    suite = ET.parse(run.out / "junit.xml").getroot()
    cases = suite.findall(".//testcase")
    assert [c.get("name") for c in cases] == ["pytest"] and not cases[0].findall("failure")
    assert "completed" in (run.out / "summary.md").read_text()
    assert "passed" in (run.out / "gates" / "pytest.log").read_text()


def test_only_tool_is_ipython_and_kernel_state_persists(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.add(ipython("secret_number = 6 * 7"), ipython("print('value', secret_number)"), reply("ok"))
    run = run_inproc(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    bodies = [r.body for r in server.chat_requests]
    assert len(bodies) == 3
    for body in bodies:
        assert [t["function"]["name"] for t in body["tools"]] == ["ipython"]
    third = json.dumps(bodies[2]["messages"])
    assert "value 42" in third



@pytest.mark.parametrize("route", ["direct", "litellm"])
def test_non_ascii_and_undecodable_output_reach_the_model(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer, route: str
) -> None:
    """The request body is the whole conversation, re-encoded each turn: text outside ASCII arrives as text,
    and a lone surrogate (bytes that were not UTF-8, decoded with surrogateescape) does not break the request."""
    cell = "print('héllo → ✓ 漢字')\nprint(b'raw \\xff end'.decode('utf-8', 'surrogateescape'))"
    server.add(ipython(cell), reply("ok"))
    run = run_inproc(tmp_path, buggy_repo, server, env={"PRIME_CI_ROUTE": route})
    assert run.code == 0, run.proc.stderr
    tool = [m for m in server.chat_requests[1].body["messages"] if m["role"] == "tool"][-1]["content"]
    assert "héllo → ✓ 漢字" in tool
    assert "raw " in tool and " end" in tool


def test_new_files_are_in_the_patch(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(ipython("import os\nos.makedirs('notes')\nopen('notes/new.txt', 'w').write('hello\\n')"), reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    assert run.result["changed_files"] == ["notes/new.txt"]
    assert "+hello" in (run.out / "patch.diff").read_text()
