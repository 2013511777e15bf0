"""Issue 17, resources: prime-ci's own limits on what it starts, bounded output, no daemon outlives a run.

Through the CLI and without an outer limit. The bombs are bounded (at most 20000 sleepers, 2 GiB) so that a
broken limit fails the test instead of taking the machine; whatever they leave is killed in a ``finally``.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, LOGGED, by_cgroup, live_processes_with, make_repo, run_cli, run_prime, wait_until
from prime_ci.testing import ScriptedServer, contains, ipython, reply

BOMB = """import os, shutil, sys
sleep = shutil.which("sleep")
null = os.open(os.devnull, os.O_WRONLY)
quiet = [(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]  # not holding the caller's pipes
count = 0
try:
    for count in range(20000):
        os.posix_spawn(sleep, [sys.argv[1], "600"], {}, file_actions=quiet)
except OSError as exc:
    print(f"refused after {count} processes: {exc}", flush=True)
    sys.exit(1)
print(f"spawned all {count + 1}")
"""
HOG = """import sys
blocks = []
while len(blocks) < 64:  # 2 GiB: over the limit, and bounded if the limit is broken
    blocks.append(bytes([len(blocks) % 256]) * (32 << 20))
print("allocated", len(blocks) * 32, "MiB")
"""
DAEMON = """import os, subprocess, sys
marker = sys.argv[1]
ready, write_end = os.pipe()
# the daemon says it is up on the pipe once setsid has made it a session of its own; EOF if it died before
daemon = subprocess.Popen(["setsid", "env", "-i", "bash", "-c", f'echo up >&{write_end}; exec {write_end}>&-; '
                           'exec -a "$0" sleep 1000', marker], pass_fds=(write_end,), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(write_end)
if os.read(ready, 16) != b"up\\n" or os.getsid(daemon.pid) != daemon.pid:
    sys.exit("the daemon did not start")
print("DAEMON UP", marker)
"""
SHOUT = """import os, sys
token = os.environ["LIMITS_TEST_TOKEN"].encode()
line = b"." * 61 + token + b"\\n"
block = line * ((1 << 20) // len(line))
out = sys.stdout.buffer
out.write(b"START " + token + b"\\n")
for _ in range(800 * (1 << 20) // len(block)):
    out.write(block)
out.write(b"END " + token + b"\\n")
"""

SPLIT = """import os, sys
log, token = sys.argv[1], os.environ["LIMITS_TEST_TOKEN"]
""" + LOGGED + """
print("BEFORE " + token[:20], end="", flush=True)
logged(b"BEFORE", 30)  # the host has the first half of the token: the rest comes in another read
print(token[20:] + "\\nAFTER", flush=True)
logged(b"AFTER", 30)
print("STREAM", "LEAK" if token in open(log).read() else "CLEAN")
"""


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique word in the command line of every process a test starts; what is left is killed at the end."""
    word = f"prime-ci-limits-{uuid.uuid4().hex[:12]}"
    try:
        yield word
    finally:
        for pid in live_processes_with(word):
            os.kill(pid, signal.SIGKILL)


def _repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {**BUGGY, "bomb.py": BOMB, "hog.py": HOG, "daemon.py": DAEMON,
                                         "shout.py": SHOUT, "split.py": SPLIT})


def _seen(server: ScriptedServer, request: int) -> str:
    """What the model was told after its previous cell (the last message of chat request ``request``)."""
    return str(server.chat_requests[request].body["messages"][-1]["content"])


def _gate_log(out: Path) -> str:
    (log,) = (out / "gates").glob("*.log")
    return log.read_text(errors="replace")


def _nothing_left(marker: str) -> None:
    wait_until(lambda: not live_processes_with(marker), timeout=10, what=f"no process with {marker} left")


def test_fork_bomb_in_a_cell_and_in_a_gate(tmp_path: Path, server: ScriptedServer, marker: str) -> None:
    """The default limit of 2048 processes per kernel and per gate, without an outer limit (a cgroup's as root:
    the kernel is restarted and the limit named; RLIMIT_NPROC's for another user: the forks are refused)."""
    bomb = (f"import subprocess, sys\nr = subprocess.run([sys.executable, 'bomb.py', {marker!r}], "
            "capture_output=True, text=True)\nprint('bomb exit', r.returncode, r.stdout)")
    server.add(ipython("kept = 'yes'"), ipython(bomb), ipython("print('still here', kept, 6 * 7)"), reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--gate", f"python bomb.py {marker}", "--max-gate-retries", "0")
    assert run.code == 1, run.proc.stderr  # the gate failed: gates_failed, exit 1
    assert run.result["stop_reason"] == "gates_failed"
    told = _seen(server, 2)
    assert "bomb exit 1 refused after" in told
    if by_cgroup("pids"):
        assert "the cell hit a limit (pids limit 2048 reached: forks were refused)" in told
        assert "kernel was restarted (1/5)" in told and "variables restored from the last snapshot: kept" in told
    assert "still here yes 42" in _seen(server, 3)
    log = _gate_log(run.out)
    assert "refused after" in log
    if by_cgroup("pids"):
        assert log.rstrip().endswith("[prime-ci] pids limit 2048 reached: forks were refused")
    _nothing_left(marker)


def test_memory_bomb_in_a_cell_and_in_a_gate(tmp_path: Path, server: ScriptedServer) -> None:
    """A configured limit (512 MiB, so the test is light): the kernel is killed by it and restarted (a cgroup's;
    under RLIMIT_DATA the cell raises MemoryError and the kernel lives on); the gate fails."""
    hog = "blocks = []\nwhile len(blocks) < 64:\n    blocks.append(bytes([len(blocks) % 256]) * (32 << 20))"
    server.add(ipython("kept = 'yes'"), ipython(hog), ipython("print('still here', kept)"), reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--gate", "python hog.py", "--max-gate-retries", "0",
                    env={"PRIME_CI_LIMITS": "memory=512MiB"})
    assert run.code == 1, run.proc.stderr
    told = _seen(server, 2)
    assert "still here yes" in _seen(server, 3)
    log = _gate_log(run.out)
    assert "allocated" not in log
    if not by_cgroup("memory"):
        assert "MemoryError" in told and "MemoryError" in log and run.result["gates"][0]["exit_code"] == 1
        return
    assert "the kernel process died (killed: memory limit 512 MiB)" in told, told
    assert "kernel was restarted (1/5)" in told
    assert log.rstrip().endswith("[prime-ci] killed: memory limit 512 MiB")
    assert run.result["gates"][0]["exit_code"] == 137


def test_a_kernel_killed_by_the_file_size_limit_is_told_why_once(tmp_path: Path, server: ScriptedServer) -> None:
    """The reason read from the kernel's exit status (SIGXFSZ) stays: it is named once, not once per look."""
    big = ("import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it at start\n"
           "open('big.bin', 'wb').write(b'0' * (2 << 20))")
    server.add(ipython("kept = 'yes'"), ipython(big), ipython("print('still here', kept)"), reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--sandbox", "off", env={"PRIME_CI_LIMITS": "file_size=1MiB"})
    assert run.code == 0, run.proc.stderr
    told = _seen(server, 2)
    assert "the kernel process died (killed: file size limit 1 MiB): the kernel was restarted (1/5)" in told, told
    assert told.count("file size limit") == 1, told
    assert "still here yes" in _seen(server, 3)
    (lost,) = [e["message"] for e in run.session() if e.get("type") == "message"
               and e["message"].get("role") == "toolResult" and e["message"].get("details", {}).get("restarted")]
    assert lost["details"]["status"] == "kernel_lost"


@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_file_size_limit_kills_a_gate_with_a_reason(tmp_path: Path, server: ScriptedServer, sandbox: str) -> None:
    """Also in the sandbox: its launchers (Python exec steps) restore SIGXFSZ, which Python ignores at start."""
    server.add(reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--gate", "head -c 4194304 /dev/zero > big.bin",
                    "--max-gate-retries", "0", "--sandbox", sandbox, env={"PRIME_CI_LIMITS": "file_size=1MiB"})
    assert run.code == 1, run.proc.stderr
    assert _gate_log(run.out).rstrip().endswith("[prime-ci] killed: file size limit 1 MiB")
    assert run.result["gates"][0]["exit_code"] == 128 + signal.SIGXFSZ


def test_a_cell_printing_a_gigabyte_keeps_host_and_kernel_small(tmp_path: Path, server: ScriptedServer) -> None:
    """Peak RSS (VmHWM) of the host and of the kernel stays under 300 MB: Python prints and a subprocess's output."""
    printed = ("chunk = 'x' * (1 << 20)\nfor i in range(1024):\n    print(f'{i:08d}' + chunk)\n"
               "print('END-OF-CELL')")
    piped = "import subprocess\nsubprocess.run('yes 0123456789abcdef | head -c 1000000000; echo PIPE-END', shell=True)"
    peaks = ("import os\ndef hwm(pid):\n    for line in open(f'/proc/{pid}/status'):\n"
             "        if line.startswith('VmHWM'):\n            return int(line.split()[1]) // 1024\n"
             "print('PEAKS', hwm(os.getpid()), hwm(os.getppid()))")  # sandbox off: the kernel's parent is the host
    server.add(ipython(printed), ipython(piped), ipython(peaks), reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--sandbox", "off")
    assert run.code == 0, run.proc.stderr
    first, second = _seen(server, 1), _seen(server, 2)
    assert first.startswith("00000000xxx") and first.rstrip().endswith("END-OF-CELL")
    assert "characters elided" in first and len(first) < 10_000
    assert second.rstrip().endswith("PIPE-END") and len(second) < 10_000
    # what the cells printed is counted in full, elided or not: 1 GiB and more, and a billion piped characters
    chars = [e["message"]["details"]["chars"] for e in run.session()
             if e["type"] == "message" and e["message"]["role"] == "toolResult"]
    assert len(chars) == 3 and min(chars[:2]) > 1_000_000_000, chars
    words = _seen(server, 3).split()
    kernel_mb, host_mb = int(words[words.index("PEAKS") + 1]), int(words[words.index("PEAKS") + 2])
    print(f"peak RSS: kernel {kernel_mb} MB, host {host_mb} MB")
    assert kernel_mb < 300 and host_mb < 300, (kernel_mb, host_mb)


def test_a_gate_printing_800mb_has_a_capped_log_and_its_secret_masked(tmp_path: Path, server: ScriptedServer) -> None:
    secret = f"tok-{uuid.uuid4().hex}{uuid.uuid4().hex}"
    server.add(reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--gate", "python shout.py", "--pass-env", "LIMITS_TEST_TOKEN",
                    env={"LIMITS_TEST_TOKEN": secret}, timeout=300)
    assert run.code == 0, run.proc.stderr
    (log,) = (run.out / "gates").glob("*.log")
    assert log.stat().st_size <= 16 * 1024 * 1024 + 4096
    text = log.read_bytes()
    assert text.startswith(b"START [REDACTED]\n") and text.endswith(b"END [REDACTED]\n")
    assert b"bytes elided: the log keeps the first and the last 8 MiB" in text
    assert run.result["gates"][0]["output_bytes"] > 400_000_000  # counted after masking: 130-byte lines, 72 masked
    leaks = [p for p in run.out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaks and secret not in run.proc.stdout + run.proc.stderr, leaks


def test_a_secret_split_across_reads_never_reaches_the_gate_log(tmp_path: Path, server: ScriptedServer) -> None:
    """As written, not only after the run's final secret sweep: the gate checks its own log (sandbox off)."""
    secret = f"tok-{uuid.uuid4().hex}"
    server.add(reply("done"))
    out = tmp_path / "out-0"
    run = run_prime(tmp_path, _repo(tmp_path), server, "--gate", f"python split.py {out}/gates/split.py.log",
                    "--pass-env", "LIMITS_TEST_TOKEN", "--sandbox", "off", env={"LIMITS_TEST_TOKEN": secret})
    assert run.out == out and run.code == 0, run.proc.stderr
    assert _gate_log(out) == "BEFORE [REDACTED]\nAFTER\nSTREAM CLEAN\n"


@pytest.mark.parametrize("limits", ["", "cgroup=off"], ids=["cgroup", "rlimit-marker"])
def test_setsid_env_i_daemons_do_not_outlive_the_run(
    tmp_path: Path, server: ScriptedServer, marker: str, limits: str
) -> None:
    """Sandbox off: daemons (``setsid`` + ``env -i``) from a cell and from a gate are gone when the run ends, found
    by their cgroup, or without one by the rlimit marker that ``env -i`` does not remove."""
    cell = (f"import subprocess\nprint(subprocess.run(['python', 'daemon.py', '{marker}-cell'], "
            "capture_output=True, text=True).stdout)")
    server.add(ipython(cell), reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--sandbox", "off", "--gate", f"python daemon.py {marker}-gate",
                    env={"PRIME_CI_LIMITS": limits})
    assert run.code == 0, run.proc.stderr
    assert f"DAEMON UP {marker}-cell" in _seen(server, 1)
    assert f"DAEMON UP {marker}-gate" in _gate_log(run.out)
    _nothing_left(marker)


def test_the_limits_flag_sets_them_and_a_bad_one_is_exit_2(tmp_path: Path, server: ScriptedServer) -> None:
    repo = _repo(tmp_path)
    proc = run_cli(["run", str(repo), "--task", "x", "--model", "openai/x", "--api-base",
                    "http://127.0.0.1:9/v1", "--limits", "pids=many"], cwd=tmp_path)
    assert proc.returncode == 2 and "--limits: pids='many'" in proc.stderr, proc.stderr
    server.add(reply("done"))
    run = run_prime(tmp_path, repo, server, "--gate", "python hog.py", "--max-gate-retries", "0",
                    "--limits", "memory=384MiB,pids=512")
    assert run.code == 1, run.proc.stderr
    assert "limits: processes 512" in run.proc.stderr and "memory 384 MiB" in run.proc.stderr
    killed = "[prime-ci] killed: memory limit 384 MiB" if by_cgroup("memory") else "MemoryError"
    assert _gate_log(run.out).rstrip().endswith(killed)


def test_a_childs_kernel_gets_the_runs_limits(tmp_path: Path, server: ScriptedServer) -> None:
    """A memory hog in an rlm child's kernel is stopped by --limits, not by the default 4 GiB."""
    hog = "blocks = []\nwhile len(blocks) < 64:\n    blocks.append(bytes([len(blocks) % 256]) * (32 << 20))"
    send = ipython("print(await agent_message.send('ok', receiver_role='parent'))")
    server.route(contains("hog for me"), [ipython(hog), send, reply("bye")])
    server.add(ipython("await rlm('hog for me', name='h1')"), reply("wait"), reply("done"))
    run = run_prime(tmp_path, _repo(tmp_path), server, "--limits", "memory=384MiB")
    assert run.code == 0, run.proc.stderr
    child = [r for r in server.chat_requests if contains("hog for me")(r.body)]
    told = [m["content"] for r in child for m in r.body["messages"] if m["role"] == "tool"]
    killed = "killed: memory limit 384 MiB" if by_cgroup("memory") else "MemoryError"
    assert any(killed in t for t in told), told
