"""Issue 26: ``prime-ci run REPO --from-session FILE`` goes on with a session Prime Agent wrote.

The sessions are fixtures/prime_agent's, written by Prime Agent's own SessionManager; the new session is read
back with Prime Agent's own loader (``prime_agent_code``) where node and a copy of prime-agent are at hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import prime_agent_code
from conftest import PYTEST_GATE, cli_inproc
from prime_ci.engine.from_session import load_origin
from prime_ci.engine.resume import context_message
from prime_ci.errors import ConfigError
from prime_ci.testing import ScriptedServer, ipython, reply

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "prime_agent"
FIX = "from pathlib import Path\np = Path('calc.py')\np.write_text(p.read_text().replace('a - b', 'a + b'))"


def _texts(messages: list[dict[str, object]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages]


def test_the_active_branch_after_the_last_compaction_is_taken() -> None:
    compacted = load_origin(FIXTURES / "compaction.jsonl")
    assert compacted.summary is not None and compacted.summary.startswith("FIXTURE-COMPACTION")
    kept = [context_message(e) for e in compacted.kept]
    assert [m["content"] if m else None for m in kept] == ["FIXTURE-MAIN-3 fix it"]
    assert "FIXTURE-MAIN-1" not in json.dumps(compacted.kept + compacted.after)
    assert compacted.task == "FIXTURE-MAIN-1 run the tests"

    branched = load_origin(FIXTURES / "branched.jsonl")
    text = json.dumps(branched.after)
    assert branched.summary is None and "FIXTURE-BRANCH-SUMMARY" in text and "FIXTURE-ON-C2" in text
    assert not any(off in text for off in ("FIXTURE-OFF-A1", "FIXTURE-OFF-B3", "FIXTURE-OFF-B4"))


@pytest.mark.parametrize("content", [None, b"not json\n", b'{"type":"message","id":"x"}\n', b"\xff\xfe\n"])
def test_a_session_that_cannot_be_read_is_refused(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "s.jsonl"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match="--from-session"):
        load_origin(path)


def test_an_unreadable_session_is_exit_2_with_one_line(tmp_path: Path, buggy_repo: Path) -> None:
    (tmp_path / "bad.jsonl").write_text("no session here\n")
    proc = cli_inproc(["run", str(buggy_repo), "--from-session", str(tmp_path / "bad.jsonl"), "--model",
                    "openai/scripted", "--api-base", "http://127.0.0.1:9", "--out", str(tmp_path / "out")],
                   cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--from-session" in proc.stderr
    assert not (tmp_path / "out").exists()


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
    if prime_agent_code.unavailable() is None:
        read = prime_agent_code.read("context", out / "session.jsonl")
        assert read["header"]["parentSession"] == str(source.resolve())
        seen = [m["text"] for m in read["messages"]]
        assert seen[0].startswith("FIXTURE-COMPACTION") and seen[1:4] == texts[1:4]
        assert "Python kernel is new" in seen[4] and "add() adds now" in seen[-1]
