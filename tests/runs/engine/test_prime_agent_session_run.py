"""Issue 26, a whole run: ``prime-ci run REPO --from-session FILE`` goes on with a session Prime Agent wrote, under the
gate, and the new session reads back in Prime Agent (fixtures/prime_agent's sessions; ``prime_agent_code``: the
test skips at that last step where node or Prime Agent's sources are missing, and fails there under CI)."""

from __future__ import annotations

import json
from pathlib import Path

import prime_agent_code
from conftest import PYTEST_GATE, cli_inproc
from prime_ci.testing import ScriptedServer, ipython, reply
from unit.engine.prime_agent_fixtures import FIXTURES

FIX = "from pathlib import Path\np = Path('calc.py')\np.write_text(p.read_text().replace('a - b', 'a + b'))"


def _texts(messages: list[dict[str, object]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages]


def test_a_prime_agent_session_goes_on_under_the_gate_and_reads_back_in_prime_agent(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    source = FIXTURES / "compaction.jsonl"
    server.add(ipython(FIX), reply("add() adds now"))
    out = tmp_path / "out"
    proc = cli_inproc(["run", str(buggy_repo), "--from-session", str(source), "--gate", PYTEST_GATE,
                    "--model", "openai/scripted", "--api-base", server.url, "--out", str(out), "--sandbox", "off"],
                   cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["gates"][0]["passed"] and result["changed_files"] == ["calc.py"]

    # the model went on from the conversation Prime Agent had built, and was told what is new
    first = server.chat_requests[0].body["messages"]
    texts = _texts(first[1:])
    assert "FIXTURE-COMPACTION the user asked to run the tests" in texts[0]
    assert texts[1:4] == ["FIXTURE-MAIN-3 fix it", "FIXTURE-MAIN-4 fixed add().",
                          "FIXTURE-CUSTOM-MESSAGE injected context"]
    assert "Python kernel is new" in texts[4] and len(texts) == 5

    # the new session names the one it came from, and Prime Agent's loader sees the earlier conversation in it
    header = json.loads((out / "session.jsonl").read_text().splitlines()[0])
    assert header["parentSession"] == str(source.resolve())
    prime_agent_code.require()
    read = prime_agent_code.read("context", out / "session.jsonl")
    assert read["header"]["parentSession"] == str(source.resolve())
    seen = [m["text"] for m in read["messages"]]
    assert seen[0].startswith("FIXTURE-COMPACTION") and seen[1:4] == texts[1:4]
    assert "Python kernel is new" in seen[4] and "add() adds now" in seen[-1]
