"""A killed child's host: the parent is told and nothing survives (through the CLI; the rest of the children's
promises are in process: tests/runs/children/test_child_runs.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import HANG, run_prime, wait_until
from prime_ci.testing import ScriptedServer, contains, ipython, reply
from runs.children.child_probes import PIDS, alive, cmd_has, is_child


def test_killed_child_gives_failure_notice_and_no_survivors(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.route(contains("victim task"), [ipython(PIDS + "\n" + HANG)])
    # the root's "waiting" ends its turn with the child running: the run waits for its children (until the killed
    # child's failure notice arrives) before the next model call
    server.add(ipython("await rlm('victim task', name='victim')"), reply("waiting"), reply("noted the failure"))
    import threading

    pids: list[int] = []

    def child_host() -> int:
        for pid_dir in Path("/proc").iterdir():
            if pid_dir.name.isdigit():
                try:
                    cmd = (pid_dir / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"prime_ci.child\x00" in cmd and str(tmp_path).encode() in cmd:
                    return int(pid_dir.name)
        return 0

    def killer() -> None:
        # kill the child's host once the child got its (sleeping) cell from the provider: waited for as a
        # condition, not a fixed delay
        try:
            wait_until(lambda: any(is_child(r.body) for r in server.chat_requests), timeout=120,
                       what="the child's first model request")
            wait_until(child_host, timeout=60, what="the child host process")
        except AssertionError:
            return  # the assertions below then fail
        host_pid = child_host()
        if host_pid <= 0:
            return  # never signal pid 0 (the whole process group)
        pids.append(host_pid)
        os.kill(host_pid, 9)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    run = run_prime(tmp_path, buggy_repo, server)
    t.join(5)
    assert run.code == 0, run.proc.stderr
    assert run.result["children"][0]["status"] == "error"
    assert any("RLM child victim" in json.dumps(r.body) and "failed" in json.dumps(r.body)
               for r in server.chat_requests)
    assert pids and not alive(pids[0])
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and cmd_has(p, str(tmp_path))]
    assert leftovers == []


