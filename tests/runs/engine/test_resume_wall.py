"""Issue 24 item 10: ``prime-ci resume`` counts the wall time the run had spent before it was killed: the
resumed run's --max-wall is what is left, not a fresh budget."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from conftest import cli_inproc
from prime_ci.session.crc import record_crc
from prime_ci.testing import ScriptedServer
from test_resume import _killed_after, counting_script


def _started_earlier(session: Path, seconds: float) -> None:
    """Move the run's start (the header's timestamp) back, as if it had run that long before the kill."""
    lines = session.read_bytes().splitlines(keepends=True)
    header = json.loads(lines[0])
    start = datetime.fromisoformat(header["timestamp"].replace("Z", "+00:00")) - timedelta(seconds=seconds)
    header["timestamp"] = start.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    header.pop("crc32")
    header["crc32"] = record_crc(json.dumps(header, separators=(",", ":")))
    session.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(lines[1:]))


def test_a_resumed_run_counts_the_wall_time_spent_before_the_kill(tmp_path: Path, buggy_repo: Path) -> None:
    out = tmp_path / "out"
    with ScriptedServer(script=counting_script) as srv:
        _killed_after(buggy_repo, out, srv, 2)  # --max-wall is the default, 30 minutes
        _started_earlier(out / "session.jsonl", 3600)
        asked = len(srv.chat_requests)
        resumed = cli_inproc(["resume", str(out)], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"})
        assert len(srv.chat_requests) == asked, "no model call after the wall budget is spent"
    result = json.loads((out / "result.json").read_text())
    assert resumed.returncode == 3 and result["stop_reason"] == "max_wall", resumed.stderr
    assert result["wall_s"] >= 3600, result["wall_s"]
