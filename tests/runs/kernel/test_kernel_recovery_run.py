"""Issue 6 acceptance 4: a dead kernel is restarted and its snapshot restored; the run completes."""

from __future__ import annotations

from pathlib import Path

from conftest import HANG, PYTEST_GATE, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply


def test_kernel_killed_mid_run_is_restored(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(
        ipython("import json\nanswer = 41\ndef bump(v):\n    return v + 1\nclass Box:\n    pass\nbox = Box()\n"
                "gen = (i for i in range(3))"),
        ipython("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        ipython("print('after', bump(answer), json.dumps([1]), type(box).__name__)"),
        reply("done"),
    )
    run = run_inproc(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    died = server.chat_requests[2].body["messages"][-1]["content"]
    assert "kernel was restarted (1/5)" in died
    assert "answer" in died and "bump" in died and "gen (" in died.split("not restored:")[1]
    after = server.chat_requests[3].body["messages"][-1]["content"]
    assert "after 42 [1] Box" in after


def test_restart_limit_ends_the_run_cleanly(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    kill = ipython("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    server.add(*[kill for _ in range(8)], reply("unreachable"))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", PYTEST_GATE)
    assert run.code == 1, run.proc.stderr
    assert run.result["stop_reason"] == "gates_failed" and "restart limit" in run.result["detail"]
    assert len(server.chat_requests) == 6


def test_cell_timeout_interrupts_then_restarts_a_wedged_kernel(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    wedge = ("import threading\nwhile True:\n    try:\n        threading.Event().wait()\n"
             "    except KeyboardInterrupt:\n        pass")
    server.add(ipython("kept = 'yes'"), ipython(HANG), ipython("print('KEPT', kept)"),
               ipython(wedge), ipython("print('AFTER', kept)"), reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--cell-timeout", "2s")
    assert run.code == 0, run.proc.stderr
    outputs = [str(r.body["messages"][-1]["content"]) for r in server.chat_requests]
    assert "interrupted after 2s timeout; kernel state kept" in outputs[2]
    assert "KEPT yes" in outputs[3]
    assert "ignored the interrupt" in outputs[4] and "kernel was restarted (1/5)" in outputs[4]
    assert "AFTER yes" in outputs[5]  # restored from the snapshot
