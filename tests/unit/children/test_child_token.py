"""Issue 24 item 5: with ``--sandbox off`` a cell cannot impersonate a child. The child's bridge token reaches the
child host over an inherited pipe, never its environment, and every host process that holds a credential (the
run's own process, child hosts) is undumpable: as an unprivileged user its ``/proc/PID/environ``, ``mem`` and
``fd/`` are closed to other processes of that user. As root nothing closes them (CAP_SYS_PTRACE): a root cell
reads the token from the host's memory, and the children's bridge refuses it because it does not come from the
child's host process. The run through the CLI is tests/test_child_impersonation.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from prime_ci.children import auth
from prime_ci.children.family import Family, Member
from prime_ci.children.token import FD_VAR, hand_over
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.isolation.worktree import Worktree
from prime_ci.kernel.bridge import Bridge, Refused
from prime_ci.kernel.bridge import request as bridge_request
from prime_ci.loop.budget import Budget, Limits
from prime_ci.session.log import SessionLog
from prime_ci.testing.fakes import ScriptedModel, text_reply

TOKEN = "5f0c2a9e" * 4
SECRET = "sk-run-process-canary-31337"
NOBODY = 65534


# A process holding a credential, started as root and turned into another user before it takes the credential
# (the Python it runs lives under root's home, which NOBODY cannot read): made dumpable again, as a fresh exec by
# that user would be, so only what prime-ci does makes it undumpable.
VICTIM = r'''
import ctypes, os, sys
from prime_ci.children.token import claim
from prime_ci.cli.app import host_setup
# imported before dropping to the uid: the checkout may be readable by root alone
import prime_ci.isolation.redact, prime_ci.isolation.dumpable, prime_ci.isolation.procs
uid = int(sys.argv[2])
if uid != os.getuid():
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: as an exec by that user leaves it
if sys.argv[1] == 'child':
    print('TOKEN', claim(os.environ), flush=True)
else:
    host_setup()
    print('TOKEN -', flush=True)
sys.stdin.read()
'''

ATTACKER = r'''
import os, sys
pid, uid = int(sys.argv[1]), int(sys.argv[2])
if uid != os.getuid():
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
for name in ('environ', 'mem', 'fd'):
    try:
        if name == 'fd':
            print(name, 'listed', os.listdir(f'/proc/{pid}/fd'))
        else:
            with open(f'/proc/{pid}/{name}', 'rb') as f:
                print(name, 'read', f.read(4096) if name == 'environ' else 'ok')
    except OSError as e:
        print(name, 'refused', type(e).__name__)
'''


@pytest.fixture(params=["root", "nobody"])
def uid(request: pytest.FixtureRequest) -> int:
    if request.param == "nobody":
        if os.geteuid() != 0:
            return os.geteuid()  # already an unprivileged user: test as that one
        return NOBODY
    if os.geteuid() != 0:
        pytest.skip("needs root")
    return 0


@pytest.fixture(params=["child", "run"])
def victim(request: pytest.FixtureRequest, uid: int) -> Iterator[tuple[str, int, str]]:
    """(which host process, its pid, the token it took) while it runs as ``uid``."""
    pipe = hand_over(TOKEN)
    env = {**os.environ, "OPENAI_API_KEY": SECRET, FD_VAR: str(pipe)}
    try:
        proc = subprocess.Popen([sys.executable, "-c", VICTIM, request.param, str(uid)], env=env, cwd="/",
                                pass_fds=(pipe,), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    finally:
        os.close(pipe)
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline().split()
    try:
        assert line[:1] == ["TOKEN"], line
        yield request.param, proc.pid, line[1]
    finally:
        proc.stdin.close()
        proc.wait(30)


def test_host_processes_holding_credentials_are_closed_to_their_user(victim: tuple[str, int, str], uid: int) -> None:
    kind, pid, taken = victim
    if kind == "child":
        assert taken == TOKEN, "the child host got its token over the pipe"
    probe = subprocess.run([sys.executable, "-c", ATTACKER, str(pid), str(uid)], capture_output=True, text=True,
                           cwd="/", check=True, timeout=60)
    seen = dict(line.split(" ", 1) for line in probe.stdout.splitlines())
    assert set(seen) == {"environ", "mem", "fd"}, probe.stdout + probe.stderr
    assert TOKEN not in seen["environ"], "the token is never in the environment"
    if uid == 0:
        assert seen["environ"].startswith("read"), "root reads any process: only the environment's content counts"
    else:
        assert all(v.startswith("refused PermissionError") for v in seen.values()), seen


# A child host's request on the children's bridge, from whatever process runs this.
CALL = r'''
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(json.dumps({'op': 'child.model', 'child': 'left', 'token': sys.argv[2], 'peer_pid': 1, 'tools': [],
                      'messages': [{'role': 'user', 'content': 'work'}]}).encode() + b'\n')
print(s.makefile().readline(), flush=True)  # a pipe: block-buffered unless PYTHONUNBUFFERED
sys.stdin.read()
'''


def test_a_childs_token_is_good_only_from_its_own_host_process(tmp_path: Path) -> None:
    """Even a token read from a child host's memory (root can) speaks for the child only from that host."""

    async def scenario() -> tuple[str, str, int]:
        model = ScriptedModel([text_reply("for the real host")])
        log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
        wt = Worktree(tmp_path, tmp_path / ".git", "0" * 40, tmp_path, str(tmp_path))
        fam = Family(log, tmp_path, wt, Budget(Limits()), model, lambda name: model, {}, "", 1, 4, 10, 60.0,
                     lambda text: None, limits=BoxLimits())
        bridge = Bridge(tmp_path / "bridge", peer=True)
        (tmp_path / "bridge").mkdir()
        bridge.register("child.model", auth.as_child(fam.model_call))
        await bridge.start()
        host = await asyncio.create_subprocess_exec(sys.executable, "-c", CALL, str(bridge.path), TOKEN,
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        member = Member("left", "left", "root", 1, model.name, tmp_path / "left", token=TOKEN, proc=host)
        fam.members["left"] = member
        assert host.stdout is not None and host.stdin is not None
        from_host = (await host.stdout.readline()).decode()
        try:
            await bridge_request(str(bridge.path), "child.model", child="left", token=TOKEN, peer_pid=host.pid,
                                 tools=[], messages=[{"role": "user", "content": "stolen"}])
            from_elsewhere = "accepted"
        except Refused as exc:
            from_elsewhere = f"refused: {exc}"
        host.stdin.close()
        await host.wait()
        await bridge.close()
        return from_host, from_elsewhere, len(model.calls)

    from_host, from_elsewhere, calls = asyncio.run(scenario())
    assert '"ok": true' in from_host and "for the real host" in from_host, from_host
    assert from_elsewhere == "refused: unknown child"
    assert calls == 1
