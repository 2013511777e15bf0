"""Issue 40: a run that ended ``model_error`` because the provider failed (a server that died, a key that was
refused) goes on with ``prime-ci resume OUT`` once the provider answers again: from its last entry, in a worktree
checked out again with the run's patch re-applied, to its gates."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import BUGGY, FIX, PYTEST_GATE, cli_inproc, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, error, ipython, reply


def test_a_run_the_provider_stopped_goes_on_when_it_answers_again(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(ipython(FIX), error(401, "the provider is down"))
    first = run_inproc(tmp_path, repo, server, "--sandbox", "off", "--gate", PYTEST_GATE)
    assert first.code == 4 and first.result["stop_reason"] == "model_error", first.proc.stderr
    assert "+    return a + b" in (first.out / "patch.diff").read_text()
    asked = len(server.chat_requests)

    server.add(reply("The fix is in place."))
    resumed = cli_inproc(["resume", str(first.out)], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test-canary"})
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads((first.out / "result.json").read_text())
    assert result["stop_reason"] == "completed" and result["gates"][-1]["passed"]
    assert "+    return a + b" in (first.out / "patch.diff").read_text()
    # the conversation went on from its last entry: the fix's cell and its result were in the request
    request = server.chat_requests[asked]
    assert len(server.chat_requests) == asked + 1
    sent = json.dumps(request.body["messages"])
    assert "a + b" in sent and "provider kept failing" in sent and "patch, as it was when the run stopped" in sent


def test_a_finished_run_is_still_only_reported(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(ipython(FIX), reply("done"))
    first = run_inproc(tmp_path, repo, server, "--sandbox", "off", "--gate", PYTEST_GATE)
    assert first.code == 0, first.proc.stderr
    again = cli_inproc(["resume", str(first.out)], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test-canary"})
    assert again.returncode == 0 and "had already finished" in again.stderr
    assert len(server.chat_requests) == 2


def test_resume_of_a_prime_agent_session_points_to_from_session(tmp_path: Path) -> None:
    out = tmp_path / "pa-run"
    out.mkdir()
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "prime_agent" / "branched.jsonl"
    (out / "session.jsonl").write_bytes(fixture.read_bytes())
    refused = cli_inproc(["resume", str(out)], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test-canary"})
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--from-session" in lines[0] and "not a prime-ci run's session" in lines[0], lines
