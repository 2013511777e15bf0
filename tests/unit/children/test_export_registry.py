"""Export's sub-agent registry names each child by its task (issue 40): Prime Agent's sub-agent list shows a
child's ``prompt``, the task its parent gave, without the prefix prime-ci's child host adds to it."""

from __future__ import annotations

import json
from pathlib import Path

from prime_ci.children.export import REGISTRY, export_prime_agent
from prime_ci.session.log import SessionLog

TASK = "Fix the rounding in money.py; report the failing test you fixed."


def test_the_registry_names_each_child_by_its_task(tmp_path: Path) -> None:
    out, dest = tmp_path / "out", tmp_path / "dest"
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

    export_prime_agent(out, dest)
    [registry] = (dest / "session-artifacts").glob(f"*/{REGISTRY}")
    [record] = [json.loads(line) for line in registry.read_text().splitlines()]
    assert record["type"] == "rlm_subagent" and record["childId"] == "sub-0123abcd"
    assert record["prompt"] == TASK
    assert (record["sessionName"], record["rlmDepth"]) == ("kid", 1)
