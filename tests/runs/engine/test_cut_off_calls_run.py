"""Issue 23 item 8, a whole run: a strict server's run cut off inside a tool call goes on to the next turn."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import make_repo, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply, tool_call
from unit.engine.cut_off_call import CUT


def test_a_strict_server_run_cut_off_inside_a_tool_call_goes_on_to_the_next_turn(tmp_path: Path) -> None:
    """Acceptance 4, through the CLI against the strict scripted server (llama.cpp's 500 on unreadable arguments)."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", ".gitignore": ".prime-ci/\n"})
    cut = reply(None, [tool_call("ipython", CUT)], finish_reason="length")
    empty = reply(None, [tool_call("ipython", "")], finish_reason="length")
    steps = [cut, empty, ipython("open('small.py', 'w').write('x = 1\\n')"), reply("done")]
    with ScriptedServer(steps, strict=True) as srv:
        run = run_inproc(tmp_path, repo, srv, "--gate", "python small.py")
        rejected, requests = srv.rejected, srv.chat_requests
    assert run.code == 0, run.proc.stderr
    assert not rejected, [r.rejected for r in rejected]
    assert len(requests) == 4 and run.result["usage"]["turns"] == 4
    last = requests[-1].body["messages"]
    sent = [c["function"]["arguments"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert [json.loads(a) for a in sent[:2]] == [{"code": "open('big.py', 'w').write('''\nline 1\nli"}, {}]
    assert "small.py" in run.result["changed_files"]
