"""Issue 40: a child compacts like the root (the same rule, the same ledger) and clamps its completion to its
window; ``await compact.run()`` works in a child's kernel too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, contains, ipython, reply

TASK = "summarise the big outputs"
WINDOW = 2500
BIG = "print('x' * 2400)"


def child_summary(body: dict[str, Any]) -> bool:
    return not body.get("tools") and contains(TASK)(body)


def test_a_child_under_a_small_window_compacts_and_finishes(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.route(child_summary, [reply(f"## Goal\n{TASK}\n## Progress\nprinted big outputs")] * 6)
    server.route(contains(TASK), [ipython(BIG), ipython(BIG), ipython("await compact.run()"), ipython(BIG),
                                  ipython(BIG), reply("child done")])
    server.add(ipython(f"r = await rlm({TASK!r}, name='c')\nprint(r)"), reply("done"))
    run = run_inproc(tmp_path, repo, server, "--sandbox", "off", "--context-window", str(WINDOW))
    assert run.code == 0, run.proc.stderr
    child = [r.body for r in server.chat_requests if contains(TASK)(r.body)]
    summaries = [b for b in child if not b.get("tools")]
    assert summaries, "the child never compacted"
    assert any(b.get("tools") for b in child[child.index(summaries[0]):]), "the child went on after compacting"
    for body in child:  # every completion fits the window with the prompt (the scripted server's 4 chars a token)
        prompt = len(json.dumps(body["messages"])) // 4
        assert body["max_tokens"] <= WINDOW and prompt + body["max_tokens"] <= WINDOW * 1.5, (prompt,
                                                                                              body["max_tokens"])
    children = list((run.out / "children").glob("*/session.jsonl"))
    assert children and "compaction" in children[0].read_text()
