"""Export names each child by its task (issue 40), as Prime Agent shows a live child: by the task its parent gave,
without the prefix prime-ci's child host adds to it. The registry's ``prompt`` is that task, and so is the
exported child's first user message, from which Prime Agent labels a sub-agent it reads from disk."""

from __future__ import annotations

import json
from pathlib import Path

from prime_ci.children.export import REGISTRY, export_prime_agent
from prime_ci.session.log import SessionLog, read_session

TASK = "Fix the rounding in money.py; report the failing test you fixed."


def run_with_a_child(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "children" / "kid").mkdir(parents=True)
    root = SessionLog.create(out / "session.jsonl", cwd=str(tmp_path))
    root.custom("prime_ci.child", {"event": "spawned", "rlm_child_id": "sub-0123abcd", "name": "kid",
                                   "session_dir": str(out / "children" / "kid"), "parent": "root", "depth": 1,
                                   "model": "openai/gpt-4o-mini"})
    root.close()
    child = SessionLog.create(out / "children" / "kid" / "session.jsonl", cwd=str(tmp_path))
    child.message("user", [{"type": "text", "text": f"[task from parent]\n\n{TASK}"}])  # as children/host.py
    child.message("assistant", [{"type": "text", "text": "done"}])
    child.close()
    return out


def test_the_registry_names_each_child_by_its_task(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    export_prime_agent(run_with_a_child(tmp_path), dest)
    [registry] = (dest / "session-artifacts").glob(f"*/{REGISTRY}")
    [record] = [json.loads(line) for line in registry.read_text().splitlines()]
    assert record["type"] == "rlm_subagent" and record["childId"] == "sub-0123abcd"
    assert record["prompt"] == TASK
    assert (record["sessionName"], record["rlmDepth"]) == ("kid", 1)


def test_the_exported_child_reads_its_task_without_the_prefix(tmp_path: Path) -> None:
    out, dest = run_with_a_child(tmp_path), tmp_path / "dest"
    _, written = export_prime_agent(out, dest)
    exported = read_session(written, strict=True)
    assert not exported.rewritten, "the task's line is signed again"
    task, answer = (e["message"] for e in exported.entries if e["type"] == "message")
    assert (task["role"], task["content"]) == ("user", [{"type": "text", "text": TASK}])
    assert answer["content"] == [{"type": "text", "text": "done"}]
    source = (out / "children" / "kid" / "session.jsonl").read_bytes().split(b"\n")
    lines = written.read_bytes().split(b"\n")  # the header and the task aside, byte for byte
    assert [a == b for a, b in zip(lines, source, strict=True)] == [False, False, True, True]
