"""Issue 17 acceptance: the sandbox isolates when prime-ci runs as root (and still as a normal user)."""

from __future__ import annotations

import errno
import os
import platform
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_prime
from prime_ci.isolation import seccomp
from prime_ci.isolation.sandbox import bwrap_binary
from prime_ci.testing import ScriptedServer, ipython, reply

CANARY = "sk-test-canary"  # run_prime's OPENAI_API_KEY


def bwrap_runs() -> bool:
    """bwrap can make a user namespace here: from then on a sandbox that does not isolate is a failure, not a
    reason to skip."""
    bwrap = bwrap_binary()
    return bwrap is not None and subprocess.run([bwrap, "--unshare-user", "--ro-bind", "/", "/", "true"],
                                                capture_output=True, check=False).returncode == 0


needs_sandbox = pytest.mark.skipif(not bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
ROOT = os.geteuid() == 0
OUTSIDE = ("/etc/prime-ci-escape", "/var/tmp/prime-ci-escape", "/usr/prime-ci-escape")

ESCAPE_CELL = r'''
import ctypes, errno, os, subprocess
NUMBERS = __NUMBERS__
HOST_PIDS = __HOST_PIDS__
libc = ctypes.CDLL(None, use_errno=True)

def sh(cmd):
    proc = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    print('SH', 'ok' if proc.returncode == 0 else 'refused', cmd)

def verdict(result):
    return 'ok' if result >= 0 else errno.errorcode.get(ctypes.get_errno(), '?')

for cmd in ('mount -o remount,rw /', 'mount -o remount,rw,bind /', 'umount /tmp', 'umount -l /tmp',
            'umount /proc', 'umount -l /proc', 'mount -t proc proc /mnt', 'unshare -m true', 'unshare -Ur true',
            'unshare -Urm umount -l /proc', 'nsenter -t 1 -m true'):
    sh(cmd)
print('LIBC mount', verdict(libc.mount(b'none', b'/', None, 0x20 | 0x1000, None)))  # MS_REMOUNT | MS_BIND
print('LIBC umount2', verdict(libc.umount2(b'/proc', 2)))  # MNT_DETACH
print('LIBC unshare', verdict(libc.unshare(0x10000000)))  # CLONE_NEWUSER
print('LIBC unshare', verdict(libc.unshare(0x00020000)))  # CLONE_NEWNS
try:
    print('LIBC setns', verdict(libc.setns(os.open('/proc/self/ns/mnt', os.O_RDONLY), 0)))
except OSError as e:
    print('LIBC setns', 'no /proc/self', e.errno)
child = subprocess.Popen(['cat'], stdin=subprocess.PIPE)
print('LIBC ptrace', verdict(libc.ptrace(16, child.pid, None, None)))  # PTRACE_ATTACH
child.kill()
child.wait()
print('LIBC init_module', verdict(libc.init_module(None, 0, b'')))
print('LIBC delete_module', verdict(libc.delete_module(b'ext4', 0)))
for name, args in (('pivot_root', (b'/tmp', b'/tmp')), ('keyctl', (0, -3, 0)),
                   ('add_key', (b'user', b'k', b'v', 1, -3)), ('request_key', (b'user', b'k', None, 0)),
                   ('bpf', (0, None, 0)),
                   ('perf_event_open', (None, 0, -1, -1, 0)), ('userfaultfd', (0,)), ('kexec_load', (0, 0, None, 0)),
                   ('finit_module', (-1, b'', 0)), ('open_by_handle_at', (-1, None, 0)), ('clone3', (None, 0))):
    print('CALL', name, verdict(libc.syscall(NUMBERS[name], *args)))
for target in ('/etc/prime-ci-escape', '/var/tmp/prime-ci-escape', '/usr/prime-ci-escape',
               subprocess.run(['git', 'rev-parse', '--absolute-git-dir'], capture_output=True,
                              text=True).stdout.strip() + '/prime-ci-escape',
               '/proc/sys/kernel/core_pattern', '/proc/sysrq-trigger', '/sys/fs/cgroup/prime-ci-escape'):
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
        print('WRITE ok', target)
    except OSError as e:
        print('WRITE refused', target, errno.errorcode.get(e.errno))
open('inside.txt', 'w').write('fine\n')
for mode_change in (lambda: os.chmod('inside.txt', 0o4755),
                    lambda: os.open('setuid', os.O_WRONLY | os.O_CREAT, 0o2755)):
    try:
        mode_change()
        print('SETID ok')
    except OSError as e:
        print('SETID refused', errno.errorcode.get(e.errno))
pid_max = int(open('/proc/sys/kernel/pid_max').read()) if os.path.exists('/proc/sys/kernel/pid_max') else 1 << 22
readable, keyed = [], []
for pid in sorted(set(HOST_PIDS) | set(range(1, min(pid_max, 1 << 16) + 1))):
    try:
        data = open(f'/proc/{pid}/environ', 'rb').read()
    except OSError:
        continue
    readable.append(pid)
    if b'OPENAI_API_KEY' in data:
        keyed.append(pid)
print('ENVIRON readable', readable, 'keyed', keyed)
print('HOST visible', [p for p in HOST_PIDS if os.path.exists(f'/proc/{p}')])
if os.path.exists('/proc/self/status'):
    print('PIDNS', os.readlink('/proc/self/ns/pid'))
    status = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines())
    print('CAPS', [status[k].strip() for k in ('CapPrm', 'CapEff', 'CapBnd')])
'''


def cell_output(server: ScriptedServer, index: int = 1) -> str:
    content = server.chat_requests[index].body["messages"][-1]["content"]
    return content if isinstance(content, str) else str(content)


def canary_hits(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and CANARY.encode() in p.read_bytes()]


def kept_worktree(run_result: dict[str, object]) -> Path:
    path = run_result.get("worktree")
    assert isinstance(path, str), run_result
    return Path(path)


@needs_sandbox
def test_a_cell_cannot_remount_unmount_ptrace_unshare_or_read_host_environ(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    # a host process holding the key, as the prime-ci host does
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                              env={**os.environ, "OPENAI_API_KEY": CANARY})
    try:
        numbers = seccomp.ARCHES[platform.machine()].numbers
        cell = ESCAPE_CELL.replace("__NUMBERS__", repr(numbers)).replace(
            "__HOST_PIDS__", repr([holder.pid, os.getpid(), os.getppid()]))
        server.add(ipython(cell), reply("done"))
        gate = ("mount -o remount,rw / && touch /etc/prime-ci-gate-escape; umount -l /proc; "
                "cat /proc/*/environ | tr '\\0' '\\n' | grep -c OPENAI_API_KEY; true")
        run = run_prime(tmp_path, buggy_repo, server, "--sandbox", "on", "--gate", gate, "--keep-worktree")
    finally:
        holder.communicate(b"")
    escaped = [path for path in (*OUTSIDE, "/etc/prime-ci-gate-escape") if Path(path).exists()]
    for path in escaped:
        Path(path).unlink()
    assert escaped == [], "the sandbox wrote on the host"
    assert run.code == 0, run.proc.stderr
    worktree = kept_worktree(run.result)
    try:
        assert "user namespaces, no capabilities, seccomp" in run.result["sandbox"]
        out = cell_output(server)
        assert "LIBC" in out and "CAPS" in out, out  # the cell ran to its end
        assert [line for line in out.splitlines() if line.startswith("SH ok")] == []
        libc_lines = [line for line in out.splitlines() if line.startswith("LIBC")]
        assert len(libc_lines) == 8 and all(line.endswith(" EPERM") for line in libc_lines), libc_lines
        calls = dict(line.split()[1:3] for line in out.splitlines() if line.startswith("CALL"))
        assert calls.pop("clone3") == "ENOSYS" and set(calls.values()) == {"EPERM"} and len(calls) == 10, calls
        assert "WRITE ok" not in out and out.count("WRITE refused") == 7
        assert "SETID ok" not in out and out.count("SETID refused") == 2
        assert "keyed []" in out and "HOST visible []" in out
        assert f"PIDNS {os.readlink('/proc/self/ns/pid')}" not in out
        assert "CAPS ['0000000000000000', '0000000000000000', '0000000000000000']" in out
        assert not (worktree.parent / "git" / "prime-ci-escape").exists()
        assert not (buggy_repo / "inside.txt").exists()
        assert run.result["changed_files"] == ["inside.txt"]
        assert not os.stat(worktree / "inside.txt").st_mode & 0o6000
        assert canary_hits(run.out) == []
        assert not [r for r in server.requests if CANARY in str(r.body)]
    finally:
        shutil.rmtree(worktree.parent, ignore_errors=True)


@needs_sandbox
def test_files_written_in_the_sandbox_are_the_hosts_and_git_works_on_both_sides(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    cell = (
        "import os, subprocess\n"
        "os.mkdir('made')\nopen('made/inside.txt', 'w').write('x\\n')\n"
        "open('calc.py', 'a').write('# edited inside\\n')\n"
        "for cmd in (['git', 'status', '--porcelain'], ['git', 'log', '-1', '--format=%s'], ['git', 'diff', '--stat'],"
        " ['git', 'stash', 'list']):\n"
        "    p = subprocess.run(cmd, capture_output=True, text=True)\n"
        "    print('GIT', p.returncode, cmd[1], p.stderr.strip()[:300])\n"
        "print('OWNERS', os.stat('made/inside.txt').st_uid == os.stat('test_calc.py').st_uid)\n"
    )
    server.add(ipython(cell), reply("done"))
    run = run_prime(tmp_path, buggy_repo, server, "--sandbox", "on", "--keep-worktree")
    assert run.code == 0, run.proc.stderr
    worktree = kept_worktree(run.result)
    try:
        out = cell_output(server)
        assert out.count("GIT 0") == 4, out
        assert "OWNERS True" in out
        made = worktree / "made" / "inside.txt"
        assert (made.stat().st_uid, made.stat().st_gid) == (os.getuid(), os.getgid())
        assert (worktree / "calc.py").stat().st_uid == os.getuid()
        git = ["git", "-C", str(worktree), "-c", "user.name=t", "-c", "user.email=t@t"]
        for step in (["add", "-A"], ["commit", "-qm", "from the sandbox"], ["status", "--porcelain"]):
            proc = subprocess.run([*git, *step], capture_output=True, text=True)
            assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    finally:
        shutil.rmtree(worktree.parent, ignore_errors=True)


WEAKENED_BWRAP = """#!{python}
import os, sys
drop = {drop!r}
args, out = sys.argv[1:], []
while args and args[0] != "--":
    arg = args.pop(0)
    if arg in drop:
        del args[:drop[arg]]
    else:
        out.append(arg)
os.execv({bwrap!r}, [{bwrap!r}, *out, *args])
"""
WEAKENINGS = {
    "no-seccomp": ({"--seccomp": 1}, "seccomp"),
    "no-userns-no-cap-drop": ({"--unshare-user": 0, "--uid": 1, "--gid": 1, "--cap-drop": 1}, "capabilities"),
}


@needs_sandbox
@pytest.mark.parametrize("weakening", sorted(WEAKENINGS))
def test_sandbox_on_refuses_a_bwrap_that_does_not_isolate(
    weakening: str, tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    drop, reason = WEAKENINGS[weakening]
    if weakening == "no-userns-no-cap-drop" and not ROOT:
        pytest.skip("without root, bwrap always makes a user namespace and keeps no capabilities")
    fake = tmp_path / "bwrap"
    fake.write_text(WEAKENED_BWRAP.format(python=sys.executable, drop=drop, bwrap=bwrap_binary()))
    fake.chmod(0o755)
    server.add(ipython("print('ran unsandboxed')"), reply("done"))
    auto = run_prime(tmp_path, buggy_repo, server, "--sandbox", "auto", env={"PRIME_CI_BWRAP": str(fake)})
    assert auto.code == 0, auto.proc.stderr
    assert auto.result["sandbox"].startswith("off (auto: ") and reason in auto.result["sandbox"]
    warnings = [line for line in auto.proc.stderr.splitlines() if "without the sandbox" in line]
    assert len(warnings) == 1 and reason in warnings[0], auto.proc.stderr
    asked = len(server.requests)
    server.add(reply("must never be called"))
    on = run_prime(tmp_path, buggy_repo, server, "--sandbox", "on", env={"PRIME_CI_BWRAP": str(fake)})
    assert on.code == 5, on.proc.stderr
    lines = [line for line in on.proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "sandbox" in lines[0] and reason in lines[0], lines
    assert len(server.requests) == asked


def run_filter(program: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """A classic BPF interpreter for the few instructions the filter uses: the verdict for one call."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))  # struct seccomp_data
    code = list(struct.iter_unpack("=HBBI", program))
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif op == 0x06:
            return int(k)
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += jt if taken else jf
        pc += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_refuses_what_it_lists_and_allows_the_rest(machine: str) -> None:
    program = seccomp.program(machine)
    assert program is not None
    arch = seccomp.ARCHES[machine]
    nums = arch.numbers
    eperm, enosys = seccomp.RET_ERRNO | errno.EPERM, seccomp.RET_ERRNO | errno.ENOSYS
    for name in seccomp.DENIED:
        if name in nums:
            assert run_filter(program, arch.audit, nums[name]) == eperm, name
    for name in seccomp.NOT_IMPLEMENTED:
        assert run_filter(program, arch.audit, nums[name]) == enosys, name
    assert run_filter(program, arch.audit, nums["clone"], (0x10000000 | 17,)) == eperm
    assert run_filter(program, arch.audit, nums["clone"], (0x003D0F00,)) == seccomp.RET_ALLOW  # pthread_create
    assert run_filter(program, arch.audit, nums["unshare"], (0x400,)) == seccomp.RET_ALLOW  # CLONE_FILES
    assert run_filter(program, arch.audit, nums["fchmodat"], (0, 0, 0o4755)) == eperm
    assert run_filter(program, arch.audit, nums["fchmodat"], (0, 0, 0o755)) == seccomp.RET_ALLOW
    assert run_filter(program, arch.audit, nums["openat"], (0, 0, 0o101, 0o2755)) == eperm
    assert run_filter(program, arch.audit, nums["openat"], (0, 0, 0, 0o4755)) == seccomp.RET_ALLOW  # no O_CREAT
    assert run_filter(program, arch.audit, nums["openat"], (0, 0, 0o101, 0o644)) == seccomp.RET_ALLOW
    assert run_filter(program, 0x40000003, nums["openat"]) == seccomp.RET_KILL_PROCESS  # i386 via int 0x80
    if arch.x32:
        assert run_filter(program, arch.audit, seccomp.X32_BIT | 1) == seccomp.RET_KILL_PROCESS
    assert seccomp.program("sparc") is None
