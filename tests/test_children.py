"""A killed child's host: the parent is told and nothing survives (through the CLI; the rest of the children's
promises are in process: tests/runs/children/test_child_runs.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import HANG, run_prime, wait_until
from prime_ci.testing import ScriptedServer, contains, ipython, reply

# In a sandbox every kernel is pid 2 of its own PID namespace: identify a kernel by (namespace, pid).
PIDS = "import os\nprint('PIDS', os.getpid(), os.getppid(), os.readlink('/proc/self/ns/pid'))"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _is_child(body: dict[str, object]) -> bool:
    messages = body["messages"]
    assert isinstance(messages, list)
    return str(messages[1].get("content", "")).startswith("[task from parent]")


def _last_tool_output(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    return "\n".join(str(m.get("content")) for m in messages if m.get("role") in ("tool", "user"))


def test_killed_child_gives_failure_notice_and_no_survivors(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.route(contains("victim task"), [ipython(PIDS + "\n" + HANG)])
    # the root's second cell waits (on the condition, in the kernel) until the killed child is no longer running
    server.add(ipython("await rlm('victim task', name='victim')"),
               ipython("import asyncio\nwhile any(c['status'] == 'running' for c in await rlm.list_subagents()):\n"
                       "    await asyncio.sleep(0.05)"),
               reply("waiting"), reply("noted the failure"))
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
            wait_until(lambda: any(_is_child(r.body) for r in server.chat_requests), timeout=120,
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
    assert pids and not _alive(pids[0])
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmd_has(p, str(tmp_path))]
    assert leftovers == []


def _cmd_has(proc: Path, needle: str) -> bool:
    try:
        return needle.encode() in (proc / "cmdline").read_bytes() and _alive(int(proc.name))
    except OSError:
        return False
