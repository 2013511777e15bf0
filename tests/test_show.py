"""`prime-ci show` renders a run's session and its children, tolerating a torn last line."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli
from prime_ci.session.log import SessionLog


def test_show_renders_children_and_torn_tail(tmp_path: Path) -> None:
    root = SessionLog.create(tmp_path / "session.jsonl", cwd="/work")
    root.message("assistant", [{"type": "text", "text": "spawning"},
                               {"type": "toolCall", "id": "c1", "name": "ipython", "arguments": {"code": "x = 1"}}])
    root.message("toolResult", [{"type": "text", "text": "ROOT-RESULT"}], toolCallId="c1", toolName="ipython",
                 isError=False)
    root.custom("prime_ci.stop", {"stop_reason": "completed", "exit_code": 0})
    root.close()
    child = SessionLog.create(tmp_path / "children" / "worker" / "session.jsonl", cwd="/work",
                              parent_session=str(tmp_path / "session.jsonl"), depth=1)
    child.custom_message("agent_message", "[task from parent]\n\nCHILD-TASK")
    child.close()
    with open(tmp_path / "session.jsonl", "ab") as fh:
        fh.write(b'{"type":"message","id":"deadbeef","par')
    proc = run_cli(["show", str(tmp_path / "session.jsonl")], cwd=tmp_path, env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "ROOT-RESULT" in out and "x = 1" in out and "CHILD-TASK" in out and "rlm depth 1" in out
    assert "torn last line" in out and "stop: completed (exit 0)" in out
