"""Issue 24 item 5, through the CLI as a process: with ``--sandbox off`` a cell cannot speak for a child on the bridge,
whatever it reads of the child host's environment and memory (the rest is in process:
tests/unit/children/test_child_token.py)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import BUGGY, UNTIL, make_repo, run_prime
from prime_ci.testing import ScriptedServer, contains, ipython, reply

# A cell of the root agent, as a same-user attacker with --sandbox off: find the child host's process, take every
# token-shaped value from its environment and (once the host has its token: the child's first reply is in its
# session) from its memory, and try each on the children's bridge as that child.
IMPERSONATE = UNTIL + r'''
import json, os, pathlib, re, socket
h = await rlm('stay idle', name='victim')
spec_path = pathlib.Path(h['session_dir']) / 'spec.json'
def host_pid():
    for p in pathlib.Path('/proc').iterdir():
        try:
            if p.name.isdigit() and str(spec_path).encode() in (p / 'cmdline').read_bytes():
                return int(p.name)
        except OSError:
            pass
# the host is started when rlm returns, but its command line may not be readable yet: look again whenever its
# session directory changes (it writes there as it comes up)
until(lambda: host_pid() is not None, [spec_path.parent], 'the child host process')
pid = host_pid()
HEX = rb'(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])'
try:
    environ = open(f'/proc/{pid}/environ', 'rb').read()
    print('ENVIRON read', len(environ))
except OSError as e:
    environ = b''
    print('ENVIRON', type(e).__name__)
candidates = set(re.findall(HEX, environ))
ours = set(re.findall(HEX, open('/proc/self/environ', 'rb').read()))  # the run's marker: in every process
print('HOST-ONLY VALUES', len(candidates - ours))
session = pathlib.Path(h['session_dir']) / 'session.jsonl'
until(lambda: 'idle child' in (session.read_text() if session.exists() else ''), [session.parent],
      "the child's first reply in its session")
try:
    with open(f'/proc/{pid}/maps') as maps, open(f'/proc/{pid}/mem', 'rb') as mem:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split('-'))
            if 'rw' in perms:
                try:
                    mem.seek(lo)
                    candidates |= set(re.findall(HEX, mem.read(hi - lo)))
                except OSError:
                    pass
    print('MEMORY read')
except OSError as e:
    print('MEMORY', type(e).__name__)
bridge = json.loads(spec_path.read_text())['root_bridge']
for candidate in sorted(candidates):
    s = socket.socket(socket.AF_UNIX)
    s.connect(bridge)
    call = {'op': 'child.model', 'child': h['rlm_child_id'], 'token': candidate.decode(), 'tools': [],
            'messages': [{'role': 'user', 'content': 'IMPERSONATED' + ' CALL'}]}
    s.sendall(json.dumps(call).encode() + b'\n')
    print('BRIDGE', s.makefile().readline()[:120])
print('TRIED', len(candidates))
'''


def test_a_cell_cannot_speak_for_a_child_with_the_sandbox_off(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    with ScriptedServer() as server:
        server.route(contains("IMPERSONATED CALL"), [reply("stolen answer")])
        server.route(contains("stay idle"), [reply("idle child")])
        server.add(ipython(IMPERSONATE), reply("done"))
        run = run_prime(tmp_path, repo, server, "--sandbox", "off")
        requests = [r.body for r in server.chat_requests]
    assert run.code == 0, run.proc.stderr
    assert not [b for b in requests if contains("IMPERSONATED CALL")(b)], "a cell spoke for the child on the bridge"
    assert any(contains("stay idle")(b) for b in requests), "the real child got its token and made its model call"
    root = os.geteuid() == 0
    # the host makes itself undumpable first thing, but between its exec and that line its environment can be read
    # by its user (a busy machine widens the moment): what counts there is that it holds no token (HOST-ONLY
    # VALUES 0 below); its memory is read once the host has its token, long after
    looked = ("ENVIRON read", "MEMORY read") if root else ("ENVIRON ", "MEMORY PermissionError")
    assert all(any(contains(what)(b) for b in requests) for what in looked), "the cell found the child host and looked"
    assert any(contains("HOST-ONLY VALUES 0")(b) for b in requests), "no token-shaped value in the host's environment"
