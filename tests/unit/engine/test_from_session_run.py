"""Issue 26: ``prime-ci run REPO --from-session FILE`` goes on with a session Prime Agent wrote.

The sessions are fixtures/prime_agent's, written by Prime Agent's own SessionManager; the whole run, whose new
session is read back with Prime Agent's own loader (``prime_agent_code``), is in
tests/runs/engine/test_prime_agent_session_run.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_inproc
from prime_ci.engine.from_session import load_origin
from prime_ci.engine.resume import context_message
from prime_ci.errors import ConfigError
from unit.engine.prime_agent_fixtures import FIXTURES


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
