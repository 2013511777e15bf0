"""The children's tests' shared parts: a scripted family of two generations, a kernel's identity, whether a pid
lives, a chat request's origin and tool output (runs/children, test_children.py, the session parity tests)."""

from __future__ import annotations

from pathlib import Path

from prime_ci.testing import ScriptedServer, contains, ipython, reply

# In a sandbox every kernel is pid 2 of its own PID namespace: identify a kernel by (namespace, pid).
PIDS = "import os\nprint('PIDS', os.getpid(), os.getppid(), os.readlink('/proc/self/ns/pid'))"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmd_has(proc: Path, needle: str) -> bool:
    """Whether the live process at ``/proc/PID`` has ``needle`` in its command line."""
    try:
        return needle.encode() in (proc / "cmdline").read_bytes() and alive(int(proc.name))
    except OSError:
        return False


def is_child(body: dict[str, object]) -> bool:
    messages = body["messages"]
    assert isinstance(messages, list)
    return str(messages[1].get("content", "")).startswith("[task from parent]")


def last_tool_output(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    return "\n".join(str(m.get("content")) for m in messages if m.get("role") in ("tool", "user"))


def script_two_generations(server: ScriptedServer) -> None:
    """The root spawns ``kid``; kid spawns ``gk`` (depth 2), then messages its parent; every agent finishes."""
    server.route(contains("grand task"), [ipython("g = 1"), reply("grandchild finished")])
    server.route(contains("child task"), [
        ipython("await rlm('grand task', name='gk')\nprint(await agent_message.send('kid done', "
                "receiver_role='parent'))"),
        reply("kid finished"), reply("kid saw the notice"), reply("kid again"),
    ])
    server.add(ipython("await rlm('child task', name='kid')"), reply("waiting"), *[reply("done")] * 5)
