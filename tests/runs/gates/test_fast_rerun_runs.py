"""Issue 13: retry rounds first rerun only the previously failing tests; only a full gate run passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema

from conftest import BUGGY, PYTEST_GATE, Outcome, make_repo, run_inproc
from prime_ci.cli.schema_registry import schemas
from prime_ci.testing import ScriptedServer, ipython, reply

SLOW_SECONDS = 1  # a slow module: the counter, not a duration, shows the fast rerun skipped it
SLOW_SUITE = {
    **BUGGY,
    # Outside the tests' way: the gate command tells it where to count its runs.
    "test_slow.py": (
        "import os\nimport time\nfrom pathlib import Path\n\n\n"
        "def test_slow():\n"
        "    counter = Path(os.environ['SLOW_COUNTER'])\n"
        "    counter.parent.mkdir(parents=True, exist_ok=True)\n"
        "    with counter.open('a') as f:\n"
        "        f.write('ran\\n')\n"
        f"    time.sleep({SLOW_SECONDS})\n"
    ),
}
# .prime-ci/ in the worktree: excluded from the fingerprint and writable for a sandboxed gate
SLOW_GATE = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 SLOW_COUNTER=.prime-ci/slow-runs python -m pytest -q -p no:cacheprovider"
MULTIPLY = "from pathlib import Path\np = Path('calc.py')\np.write_text(p.read_text().replace('a - b', 'a * b'))\n"
FIX_MULTIPLY = "from pathlib import Path\np = Path('calc.py')\np.write_text(p.read_text().replace('a * b', 'a + b'))\n"


def gate_entries(run: Outcome) -> list[dict[str, Any]]:
    return [e["data"] for e in run.session() if e.get("type") == "custom" and e.get("customType") == "prime_ci.gate"
            and "skipped" not in e["data"]]


def last_message(server: ScriptedServer, index: int) -> str:
    content = server.chat_requests[index].body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def test_retry_round_reruns_only_the_failing_test_then_the_full_gate(
    tmp_path: Path, server: ScriptedServer
) -> None:
    repo = make_repo(tmp_path / "repo", SLOW_SUITE)
    server.add(reply("done"), ipython(MULTIPLY), reply("done, with *"), ipython(FIX_MULTIPLY), reply("fixed"))
    run = run_inproc(tmp_path, repo, server, "--gate", SLOW_GATE, "--keep-worktree")
    assert run.code == 0, run.proc.stderr
    assert run.result["stop_reason"] == "completed"
    assert len(server.chat_requests) == 5

    entries = gate_entries(run)
    assert [(e["round"], e["kind"], e["passed"]) for e in entries] == [
        (1, "full", False), (2, "fast", False), (3, "fast", True), (3, "full", True)]
    assert entries[1]["tests"] == entries[2]["tests"] == 1
    assert entries[1]["still_failing"] == ["pytest"]
    assert entries[1]["results"][0]["command"].endswith("test_calc.py::test_add")
    rounds = run.result["rounds"]
    assert [(r["round"], r["kind"], r["passed"], r["gates"]) for r in rounds] == [
        (1, "full", False, ["pytest"]), (2, "fast", False, ["pytest"]), (3, "fast", True, ["pytest"]),
        (3, "full", True, ["pytest"])]
    assert rounds[0]["duration_s"] >= SLOW_SECONDS
    # the fast rerun skips the slow module: the counter below proves it (a comparison of durations would be a
    # wall-clock assert, and a busy machine breaks it)
    assert rounds[1]["tests"] == 1
    jsonschema.validate(run.result, schemas()["result"])

    # The slow module ran in the two full runs only, not in either fast rerun.
    counter = Path(run.result["worktree"]) / ".prime-ci" / "slow-runs"
    assert counter.read_text().splitlines() == ["ran", "ran"]

    feedback = last_message(server, 3)
    assert "test_add" in feedback and "assert 6 == 5" in feedback, feedback
    assert "fast rerun of the 1 previously failing test" in feedback
    assert "full gates run once these pass" in feedback
    assert "gates/pytest.fast.log" in feedback

    assert run.result["gates"][0]["command"] == SLOW_GATE and run.result["gates"][0]["passed"] is True
    assert "2 passed" in (run.out / "gates" / "pytest.log").read_text()
    assert "1 passed" in (run.out / "gates" / "pytest.fast.log").read_text()


def test_fast_template_from_gates_file_and_final_round_runs_full(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    gates = tmp_path / "gates.toml"
    gates.write_text(f'[[gate]]\nname = "tests"\ncommand = "{PYTEST_GATE}"\n'
                     f'fast = "echo TEMPLATE {{tests}}; {PYTEST_GATE} {{tests}}"\n')
    server.add(reply("done"), ipython(MULTIPLY), reply("done, with *"))
    run = run_inproc(tmp_path, repo, server, "--gates-file", str(gates), "--max-gate-retries", "1")
    assert run.code == 1, run.proc.stderr
    assert run.result["stop_reason"] == "gates_failed"
    assert "TEMPLATE test_calc.py::test_add" in (run.out / "gates" / "tests.fast.log").read_text()
    # The retries ran out on the fast rerun: the report's round is a full run again.
    assert [(e["round"], e["kind"]) for e in gate_entries(run)] == [(1, "full"), (2, "fast"), (3, "full")]
    assert run.result["gates"][0]["command"] == PYTEST_GATE
    assert "TEMPLATE" not in (run.out / "gates" / "tests.log").read_text()


def test_fast_rerun_that_names_no_failing_test_falls_through_to_full(
    tmp_path: Path, server: ScriptedServer
) -> None:
    rename = ("from pathlib import Path\np = Path('test_calc.py')\n"
              "p.write_text(p.read_text().replace('def test_add', 'def test_add_renamed'))\n")
    server.add(reply("done"), ipython(rename), reply("renamed"), reply("giving up"))
    run = run_inproc(tmp_path, make_repo(tmp_path / "repo", BUGGY), server, "--gate", PYTEST_GATE,
                    "--max-gate-retries", "2")
    assert run.code == 1, run.proc.stderr
    entries = gate_entries(run)
    assert [(e["round"], e["kind"], e["passed"]) for e in entries] == [
        (1, "full", False), (2, "fast", False), (2, "full", False)]
    assert entries[1]["still_failing"] == []
    feedback = last_message(server, 3)
    assert feedback.startswith("Gate round 2: failed") and "test_add_renamed" in feedback
