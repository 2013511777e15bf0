"""Issue 24 item 6: as root, what the model or the repository wrote runs as an unprivileged host uid.

The kernel, setup, builds and gates run as the sandbox's own uid on the host (``hostuid``), which owns the worktree
and the run's environment: a root-only file that is not hidden, and a root-only socket, are out of its reach,
while the run's artifacts and exit code are as before (written by the host, root). Where that uid cannot be had,
``--sandbox on`` exits 5 with one line and ``--sandbox auto`` keeps root's uid on the host, saying so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, FIX, PRIME_CI, Outcome, make_repo, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply
from test_sandbox_root import bwrap_runs

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the unprivileged uid is for runs as root"),
              pytest.mark.skipif(not bwrap_runs(), reason="bubblewrap cannot make a user namespace here")]

SECRET = "root-only-secret-4f1c"
PROBE = r'''
import errno, socket
def attempt(what, action):
    try:
        action()
        print(what, 'ok')
    except OSError as e:
        print(what, 'refused', errno.errorcode.get(e.errno, e.errno))
attempt('READ-OPT', lambda: print(open(__SECRET__).read()))
attempt('READ-SHADOW', lambda: open('/etc/shadow').read())
attempt('CONNECT', lambda: socket.socket(socket.AF_UNIX).connect(__SOCKET__))
'''
# passes only when the command cannot read the file
DENIED = "! cat {secret} && ! python -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{sock}\")'"


@pytest.fixture
def root_only() -> Iterator[tuple[Path, Path]]:
    """A 0600 root-owned file under /opt (its directory open to all) and a unix socket listening in a 0700
    directory under /tmp: only root may read the one and connect to the other."""
    base = Path("/opt") if os.access("/opt", os.W_OK) else Path("/var/tmp")
    secret_dir = Path(tempfile.mkdtemp(prefix="prime-ci-uid-", dir=base))
    secret_dir.chmod(0o755)
    secret = secret_dir / "secret.txt"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    sock_dir = Path(tempfile.mkdtemp(prefix="pci-sock-"))  # 0700
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_dir / "s"))
    listener.listen(8)
    try:
        yield secret, sock_dir / "s"
    finally:
        listener.close()
        shutil.rmtree(secret_dir, ignore_errors=True)
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_as_root_the_kernel_setup_builds_and_gates_cannot_reach_root_only_files_or_sockets(
    tmp_path: Path, server: ScriptedServer, root_only: tuple[Path, Path]
) -> None:
    secret, sock = root_only
    # root can: the file and the socket are real and reachable through the sandbox's mounts
    assert secret.read_text().strip() == SECRET
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as client:
        client.connect(str(sock))
    repo = make_repo(tmp_path / "repo", BUGGY)
    cell = PROBE.replace("__SECRET__", repr(str(secret))).replace("__SOCKET__", repr(str(sock)))
    server.add(ipython(cell), ipython(FIX), reply("done"))
    denied = DENIED.format(secret=secret, sock=sock)
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--sandbox-ro", str(sock.parent),
                    "--setup", denied, "--build", denied, "--gate", f"{denied} && python -m pytest -q")
    assert run.code == 0, run.proc.stderr
    assert "host uid" in run.result["sandbox"]
    content = server.chat_requests[1].body["messages"][-1]["content"]
    out = content if isinstance(content, str) else str(content)
    assert "READ-OPT refused EACCES" in out and SECRET not in out, out
    assert "READ-SHADOW refused EACCES" in out, out
    assert "CONNECT refused EACCES" in out, out
    # setup, the build and every gate round ran and passed: none of them could read or connect either
    assert [s["passed"] for s in run.result["setup"]] == [True]
    assert run.result["build"] and all(b["passed"] for b in run.result["build"])
    assert run.result["gates"] and all(g["passed"] for g in run.result["gates"])
    # the artifacts are as before, written by the host
    patch = (run.out / "patch.diff").read_text()
    assert "-    return a - b\n+    return a + b\n" in patch
    assert len(run.session()) > 3
    for name in ("patch.diff", "session.jsonl", "result.json"):
        assert (run.out / name).stat().st_uid == 0


def run_in_container(tmp_path: Path, repo: Path, server: ScriptedServer, mode: str) -> Outcome:
    """``prime-ci run`` as root in a user namespace that maps uid 0 alone, like root in a rootless container:
    no other uid exists there to give the worktree to."""
    out = tmp_path / f"out-{mode}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    env["OPENAI_API_KEY"] = "sk-test-canary"
    argv = ["unshare", "--user", "--map-root-user", PRIME_CI, "run", str(repo), "--task", "Fix the failing test.",
            "--model", "openai/scripted", "--api-base", server.url, "--out", str(out), "--sandbox", mode]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)
    return Outcome(proc, out)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_where_no_unprivileged_uid_can_be_had_on_exits_5_and_auto_keeps_roots_uid_saying_so(
    tmp_path: Path, server: ScriptedServer
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(ipython(FIX), reply("done"))
    auto = run_in_container(tmp_path, repo, server, "auto")
    assert auto.code == 0, auto.proc.stderr
    assert "root's uid on the host" in auto.result["sandbox"] and "Invalid argument" in auto.result["sandbox"]
    warnings = [line for line in auto.proc.stderr.splitlines() if "keeps root's uid" in line]
    assert len(warnings) == 1, auto.proc.stderr
    assert "+    return a + b" in (auto.out / "patch.diff").read_text()
    asked = len(server.requests)
    server.add(reply("must never be called"))
    on = run_in_container(tmp_path, repo, server, "on")
    assert on.code == 5, on.proc.stderr
    lines = [line for line in on.proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "unprivileged uid" in lines[0] and "Invalid argument" in lines[0], lines
    assert len(server.requests) == asked
