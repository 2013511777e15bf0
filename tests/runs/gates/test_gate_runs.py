"""Issue 3 acceptance: gates in a run, in process (``run_inproc``) against the scripted server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from junitparser import JUnitXml, Properties

from conftest import BUGGY, FIX, PYTEST_GATE, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply

TWO_FAILING = {
    **BUGGY,
    "test_more.py": "def test_strings_join():\n    assert '-'.join('ab') == 'a+b'\n",
}
BIG = "python -c \"import sys; sys.stdout.write('y' * 5_000_000)\"; "


def test_two_failing_gates_fed_back_bounded_with_full_logs(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", TWO_FAILING)
    server.add(
        reply("I think it is done."),
        ipython("full = gates.last\nprint([(g.name, g.passed, len(g.output)) for g in full])"),
        reply("Giving up."),
    )
    run = run_inproc(
        tmp_path, repo, server, "--max-gate-retries", "1",
        "--gate", BIG + PYTEST_GATE + " test_calc.py",
        "--gate", BIG + PYTEST_GATE + " test_more.py",
    )
    assert run.code == 1, run.proc.stderr
    assert run.result["stop_reason"] == "gates_failed"
    first, second = server.chat_requests[0].body, server.chat_requests[1].body
    feedback = second["messages"][-1]["content"]
    assert "test_add" in feedback and "test_strings_join" in feedback
    assert "gates/python.log" in feedback and "gates/python-2.log" in feedback
    assert len(json.dumps(second)) - len(json.dumps(first)) <= 8200
    for name in ("python", "python-2"):
        assert (run.out / "gates" / f"{name}.log").stat().st_size > 5_000_000
    cell_output = server.chat_requests[2].body["messages"][-1]["content"]
    assert "('python', False, 50" in cell_output and "('python-2', False, 50" in cell_output


def test_cell_reads_full_gate_output(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(
        reply("done?"),
        ipython("out = gates.last[0].output\nprint(len(out) > 3_000_000, 'test_add' in out, 'y' * 3_000_000 in out)"),
        reply("stop"),
    )
    run = run_inproc(tmp_path, buggy_repo, server, "--max-gate-retries", "1",
                    "--gate", "python -c \"print('y' * 3_000_000)\"; " + PYTEST_GATE)
    assert run.code == 1
    assert "True True True" in server.chat_requests[2].body["messages"][-1]["content"]


def test_unchanged_workspace_is_not_rerun(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    # the counter lives in the run's own directory inside the worktree: excluded from the fingerprint, and
    # visible from the host (a sandboxed gate has a private /tmp)
    server.add(reply("done"), reply("still done"), reply("really done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--max-gate-retries", "2", "--keep-worktree",
                    "--gate", "mkdir -p .prime-ci && echo run >> .prime-ci/counter; " + PYTEST_GATE)
    assert run.code == 1 and run.result["stop_reason"] == "gates_failed"
    counter = Path(run.result["worktree"]) / ".prime-ci" / "counter"
    assert counter.read_text().count("run") == 1, "gates reran on an unchanged workspace"
    assert len(server.chat_requests) == 3
    told = server.chat_requests[1].body["messages"][-1]["content"]
    assert "not rerun" in server.chat_requests[2].body["messages"][-1]["content"]
    assert "test_add" in told


def test_flaky_gate_is_reported_and_run_completes(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    flip = ".prime-ci/flip"
    gates = tmp_path / "gates.toml"
    gates.write_text(f'[[gate]]\nname = "flaky"\ncommand = "test -e {flip} || {{ mkdir -p .prime-ci; touch {flip}; '
                     'exit 1; }"\nreruns = 2\n')
    server.add(reply("nothing to do"))
    run = run_inproc(tmp_path, buggy_repo, server, "--gates-file", str(gates))
    assert run.code == 0, run.proc.stderr
    gate = run.result["gates"][0]
    assert gate["flaky"] is True and gate["passed"] is True and gate["attempts"] == 2
    assert "flaky" in (run.out / "summary.md").read_text()
    case = next(iter(next(iter(JUnitXml.fromfile(str(run.out / "junit.xml"))))))
    props = {p.name: p.value for group in case.iterchildren(Properties) for p in group}
    assert props.get("flaky") == "true"


def test_conftest_edit_is_a_security_stop(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    skip_all = "import pytest\\n\\ndef pytest_collection_modifyitems(items):\\n    items.clear()\\n"
    server.add(ipython(f"open('conftest.py', 'w').write('{skip_all}')"), reply("tests pass now"))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", PYTEST_GATE + " -p no:cacheprovider || test $? = 5")
    assert run.code == 7, run.proc.stderr
    assert run.result["stop_reason"] == "security_stop"
    assert any("conftest.py" in f for f in run.result["flags"])


def test_test_file_edits_are_flagged(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(ipython(FIX + "open('test_calc.py', 'a').write('\\n# reviewed\\n')"), reply("fixed"))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", PYTEST_GATE)
    assert run.code == 0
    assert "test file modified: test_calc.py" in run.result["flags"]


def test_gates_from_base_ignores_head_edit(tmp_path: Path, server: ScriptedServer) -> None:
    gate_file = f'[[gate]]\nname = "tests"\ncommand = "{PYTEST_GATE}"\n'
    repo = make_repo(tmp_path / "repo", {**BUGGY, "ci/gates.toml": gate_file})
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    make_repo(repo, {"ci/gates.toml": '[[gate]]\nname = "tests"\ncommand = "true"\n'}, message="weaken gate")
    server.add(reply("done"), reply("done"))
    weak = run_inproc(tmp_path, repo, server, "--gates-file", str(repo / "ci" / "gates.toml"))
    assert weak.code == 0 and weak.result["gates"][0]["command"] == "true"
    strict = run_inproc(tmp_path, repo, server, "--gates-file", str(repo / "ci" / "gates.toml"), "--gates-from", base,
                       "--max-gate-retries", "0")
    assert strict.code == 1
    assert strict.result["gates"][0]["command"] == PYTEST_GATE


def test_junit_read_back_by_junitparser(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", TWO_FAILING)
    server.add(reply("done"))
    run = run_inproc(tmp_path, repo, server, "--max-gate-retries", "0", "--gate", PYTEST_GATE + " test_calc.py",
                    "--gate", "true")
    assert run.code == 1
    cases = {c.name: c for suite in JUnitXml.fromfile(str(run.out / "junit.xml")) for c in suite}
    assert set(cases) == {"pytest", "true"}
    assert not cases["pytest"].is_passed and "test_add" in (cases["pytest"].result[0].text or "")
    assert cases["true"].is_passed


