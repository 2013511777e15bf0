"""Issue 40, acceptance 1: a prime-ci session with a refinement, a child and a compaction, forked with Prime Agent's
own ``SessionManager.forkFrom`` (run under node, ``prime_agent_code``), reads whole in prime-ci and goes on.

The fork re-serialises every line and rewrites the usage Prime Agent attributes into the assistant lines it
targets, keeping prime-ci's crc32: ``prime-ci show`` reads every entry, saying which lines were rewritten, and
``prime-ci resume`` continues the run from the fork.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import prime_agent_code
from conftest import FIX, PYTEST_GATE, cli_inproc, run_inproc
from prime_ci.session.log import read_session
from prime_ci.testing import ScriptedServer, contains, error, ipython, reply, tool_call
from runs.children.child_probes import is_child

SUMMARIZER = "compacting the working context"


@pytest.fixture(autouse=True)
def prime_agent() -> None:
    prime_agent_code.require()


def test_a_prime_agent_fork_of_a_refined_compacted_run_with_a_child_is_shown_whole_and_resumed(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.route(contains(SUMMARIZER), [reply(f"## Goal\nsummary {n}\n## Next Steps\ngo on") for n in range(5)])
    server.route(lambda body: "submit_refinement" in json.dumps(body.get("tools")),
                 [reply(None, [tool_call("submit_refinement", {"rationale": "r", "ops": []})])] * 3)
    server.route(is_child, [reply("kid finished")] * 4)
    # the root's turn ends ('waiting') on its running child; after the child's notice it ends again: the refinement
    # it asked for, then the gate (red: the bug is still there); then a compaction, and the provider stops answering
    server.add(ipython("await rlm('child task', name='kid')"), ipython("print(await refine.run())"),
               reply("waiting"), reply("the kid is done"), ipython("print('step', *range(400))"),
               ipython("print(await compact.run())"), error(401, "the provider is down"))
    run = run_inproc(tmp_path, buggy_repo, server, "--sandbox", "off", "--gate", PYTEST_GATE,
                     "--context-window", "6000", "--harness", str(tmp_path / "h"), "--refine")
    assert run.code == 4 and run.result["stop_reason"] == "model_error", run.proc.stderr
    entries = run.session()[1:]
    kinds = [e.get("customType") or e["type"] for e in entries]
    assert {"compaction", "prime_ci.harness", "rlm_child_terminal_notice"} <= set(kinds)
    folded = [e for e in entries if e["type"] == "child_usage_attributed"]  # the child's, the refinement's, the
    assert [e.get("usageSource") for e in folded] == [None, "refinement", "compaction"]  # compaction's spend

    fork = Path(prime_agent_code.read("fork", run.out / "session.jsonl", tmp_path, tmp_path / "pa-sessions")["file"])
    forked = read_session(fork)
    assert forked.header["parentSession"] == str(run.out / "session.jsonl")
    assert not forked.bad_lines and [e["id"] for e in forked.entries] == [e["id"] for e in entries]
    # Prime Agent wrote each attributed assistant line with its aggregate usage, under prime-ci's crc32
    targets = {e["targetId"] for e in folded}
    lines = dict(zip((e["id"] for e in forked.entries), forked.lines, strict=True))
    assert forked.rewritten == sorted(lines[target] for target in targets)
    shown = cli_inproc(["show", str(fork)], cwd=tmp_path, env={"COLUMNS": "1000"})
    said = shown.stdout + shown.stderr
    assert shown.returncode == 0, said
    assert f"header by another program, {len(entries)} of {len(entries)} entries with prime-ci's checksums" in said
    assert f"from {run.out / 'session.jsonl'}" in said and f"{len(targets)} lines rewritten by another writer" in said
    assert "unreadable" not in said and "mismatch" not in said
    assert all(e["id"] in said for e in entries if e["type"] in ("message", "compaction") and e["id"] in targets)

    # the fork as the run's session, in a copy of its directory: resume goes on from it once the provider answers
    out = tmp_path / "forked-run"
    shutil.copytree(run.out, out, symlinks=True)
    shutil.copyfile(fork, out / "session.jsonl")
    asked = len(server.chat_requests)
    server.add(ipython(FIX), reply("add() adds now"))
    resumed = cli_inproc(["resume", str(out)], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test-canary"})
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "result.json").read_text())["stop_reason"] == "completed"
    sent = json.dumps(server.chat_requests[asked].body["messages"])
    assert "summary 0" in sent and "provider kept failing" in sent, "it went on from the fork's compacted context"
    again = read_session(out / "session.jsonl", strict=True)
    assert [e["id"] for e in again.entries[:len(entries)]] == [e["id"] for e in entries]
    assert again.rewritten == forked.rewritten and again.header == forked.header
