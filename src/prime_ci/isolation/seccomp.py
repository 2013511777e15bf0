"""The sandbox's seccomp filter: a classic BPF program assembled here (there is no libseccomp binding), which
bwrap installs from ``--seccomp FD`` just before it starts the sandboxed command.

Refused with EPERM: mounting and unmounting (old and new mount API), pivot_root and chroot; ptrace, reading
or writing another process's memory and kcmp (comparing another process's kernel objects); personality
(address-space randomisation off); the kernel keyrings; bpf, perf_event_open and userfaultfd; kernel modules and
kexec; open_by_handle_at; setns; clone and unshare with any ``CLONE_NEW*`` flag (no new user namespace to regain
capabilities in); reboot, swap, syslog, acct and quotas; and chmod, mknod or a
creating open that sets a set-user-ID or set-group-ID bit (the files a sandbox started by root writes are
root's on the host). ENOSYS, so that callers fall back: clone3 (its flags sit behind a pointer BPF cannot
read; libc then uses clone), openat2 (likewise its mode) and io_uring (it would run the calls above
unfiltered). A call through another ABI (i386 ``int 0x80``, x32) kills the process.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass

_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: load the 32-bit word at offset k of struct seccomp_data
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
_NR, _ARCH = 0, 4
X32_BIT = 0x40000000

# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET and NEWTIME
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
SETID_BITS = 0o6000
CREATE_FLAGS = 0o100 | 0o20000000  # O_CREAT, __O_TMPFILE (the same values on x86_64 and aarch64)

DENIED = (
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "keyctl",
    "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "open_by_handle_at", "setns", "reboot", "swapon", "swapoff",
    "syslog", "acct", "quotactl", "quotactl_fd", "iopl", "ioperm", "personality", "kcmp",
)
NOT_IMPLEMENTED = ("clone3", "openat2", "io_uring_setup", "io_uring_enter", "io_uring_register")
# A call is refused when every (argument index, mask) of its condition has a bit set.
CONDITIONS: dict[str, tuple[tuple[int, int], ...]] = {
    "clone": ((0, NAMESPACE_FLAGS),),
    "unshare": ((0, NAMESPACE_FLAGS),),
    "chmod": ((1, SETID_BITS),),
    "fchmod": ((1, SETID_BITS),),
    "creat": ((1, SETID_BITS),),
    "mknod": ((1, SETID_BITS),),
    "fchmodat": ((2, SETID_BITS),),
    "fchmodat2": ((2, SETID_BITS),),
    "mknodat": ((2, SETID_BITS),),
    "open": ((1, CREATE_FLAGS), (2, SETID_BITS)),
    "openat": ((2, CREATE_FLAGS), (3, SETID_BITS)),
}

_COMMON = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
           "mount_setattr": 442, "quotactl_fd": 443, "clone3": 435, "openat2": 437, "pidfd_getfd": 438,
           "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "fchmodat2": 452}


@dataclass(frozen=True)
class Arch:
    audit: int  # AUDIT_ARCH_* as seen in seccomp_data.arch
    numbers: dict[str, int]
    x32: bool = False  # x86_64: the x32 ABI shares the arch value and sets bit 30 of the number


ARCHES = {
    "x86_64": Arch(0xC000003E, {
        **_COMMON, "open": 2, "creat": 85, "chmod": 90, "fchmod": 91, "mknod": 133, "openat": 257, "mknodat": 259,
        "fchmodat": 268, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "keyctl": 250, "add_key": 248, "request_key": 249,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304, "unshare": 272,
        "setns": 308, "clone": 56, "reboot": 169, "swapon": 167, "swapoff": 168, "syslog": 103, "acct": 163,
        "quotactl": 179, "iopl": 172, "ioperm": 173, "personality": 135, "kcmp": 312,
    }, x32=True),
    "aarch64": Arch(0xC00000B7, {
        **_COMMON, "openat": 56, "mknodat": 33, "fchmod": 52, "fchmodat": 53, "mount": 40, "umount2": 39,
        "pivot_root": 41, "chroot": 51, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "open_by_handle_at": 265, "unshare": 97, "setns": 268, "clone": 220, "reboot": 142, "swapon": 224,
        "swapoff": 225, "syslog": 116, "acct": 89, "quotactl": 60, "personality": 92, "kcmp": 272,
    }),
}
ARCHES["arm64"] = ARCHES["aarch64"]

# Runs on the host in place of bwrap: hands it the program through an inherited pipe, so that no launcher
# (kernel, gates, children) has to pass a file descriptor along.
# Python ignores SIGPIPE and SIGXFSZ at start-up and exec keeps ignored signals: both are restored, or every
# sandboxed process would see EPIPE/EFBIG errors where it should be stopped.
LOADER = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
    "def fail(why):\n"
    "    sys.stderr.write(f'prime-ci: {why}\\n')\n"
    "    sys.exit(126)\n"
    "args, paths, uid = sys.argv[1:], [], None\n"
    "run = None\n"
    "while args[0].startswith(('uid=', 'open=', 'run=')):\n"
    "    key, _, value = args.pop(0).partition('=')\n"
    "    if key == 'uid':\n"
    "        uid = int(value)\n"
    "    elif key == 'run':\n"
    "        run = value\n"
    "    else:\n"
    "        paths.append(value)\n"
    "try:\n"
    "    exe = os.open(args[1], os.O_RDONLY)\n"
    "except OSError as e:\n"
    "    fail(f'cannot run {args[1]}: {e.strerror}')\n"
    "os.set_inheritable(exe, True)\n"
    "if paths:\n"
    "    import ctypes\n"
    "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    def mount(source, target, kind, flags, data):\n"
    "        if libc.mount(source.encode(), target.encode(), kind, flags, data) != 0:\n"
    "            fail(f'cannot mount {target}: {os.strerror(ctypes.get_errno())}')\n"
    "    if libc.unshare(0x20000) != 0:\n"
    "        fail(f'cannot make a mount namespace: {os.strerror(ctypes.get_errno())}')\n"
    "    mount('none', '/', None, 0x44000, None)\n"
    "    fds = []\n"
    "    for path in paths:\n"
    "        try:\n"
    "            fds.append(os.open(path, os.O_PATH))\n"
    "        except OSError as e:\n"
    "            fail(f'cannot open {path}: {e.strerror}')\n"
    "    mount('tmpfs', '/tmp', b'tmpfs', 0x6, b'mode=0755')\n"
    "    for i, fd in enumerate(fds):\n"
    "        source, target = f'/proc/self/fd/{fd}', f'/tmp/{i}'\n"
    "        if os.path.isdir(source):\n"
    "            os.mkdir(target)\n"
    "        else:\n"
    "            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))\n"
    "        mount(source, target, None, 0x5000, None)\n"
    "        os.close(fd)\n"
    "if run is not None:\n"
    "    os.close(exe)\n"
    "    exe = os.open('/tmp/' + run, os.O_RDONLY)\n"
    "    os.set_inheritable(exe, True)\n"
    "    args[1] = '/tmp/' + run\n"
    "if uid is not None:\n"
    "    try:\n"
    "        os.setgroups([])\n"
    "        os.setresgid(uid, uid, uid)\n"
    "        os.setresuid(uid, uid, uid)\n"
    "    except OSError as e:\n"
    "        fail(f'cannot run as uid {uid}: {e.strerror}')\n"
    "r, w = os.pipe()\n"
    "os.write(w, bytes.fromhex(args[0]))\n"
    "os.close(w)\n"
    "os.set_inheritable(r, True)\n"
    "try:\n"
    "    os.execve(exe, [args[1], '--seccomp', str(r), *args[2:]], os.environ)\n"
    "except OSError as e:\n"
    "    fail(f'cannot run {args[1]}: {e.strerror}')\n"
)
# The loader mounts what it opened (``staged``) on its own /tmp, in a mount namespace of its own (the sandbox has
# a private /tmp over it), and so runs bwrap from a descriptor it opened before: bwrap may live under /tmp.


def staged(index: int) -> str:
    """Where the loader puts the ``index``th of the paths it opened, for bwrap to bind from."""
    return f"/tmp/{index}"


_Op = tuple[int, int | str, int | str, int]


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture as ``struct sock_filter`` records, or None if unknown."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    nums = arch.numbers
    ops: list[_Op | str] = [(_LD_ABS, 0, 0, _ARCH), (_JEQ, 0, "kill", arch.audit), (_LD_ABS, 0, 0, _NR)]
    if arch.x32:
        ops.append((_JGE, "kill", 0, X32_BIT))
    ops += [(_JEQ, "eperm", 0, nums[name]) for name in DENIED if name in nums]
    ops += [(_JEQ, "enosys", 0, nums[name]) for name in NOT_IMPLEMENTED if name in nums]
    checks = sorted({cond for name, cond in CONDITIONS.items() if name in nums})
    ops += [(_JEQ, f"check{checks.index(cond)}", 0, nums[name]) for name, cond in CONDITIONS.items() if name in nums]
    ops.append((_RET, 0, 0, RET_ALLOW))
    for i, cond in enumerate(checks):
        ops.append(f"check{i}")
        for n, (arg, mask) in enumerate(cond):
            last = n == len(cond) - 1
            ops += [(_LD_ABS, 0, 0, 16 + 8 * arg), (_JSET, "eperm" if last else 0, "allow", mask)]
    ops += ["allow", (_RET, 0, 0, RET_ALLOW), "eperm", (_RET, 0, 0, RET_ERRNO | errno.EPERM),
            "enosys", (_RET, 0, 0, RET_ERRNO | errno.ENOSYS), "kill", (_RET, 0, 0, RET_KILL_PROCESS)]
    return _assemble(ops)


def _assemble(ops: list[_Op | str]) -> bytes:
    """Resolve label jumps (forward only, at most 255 instructions) and pack the records."""
    labels: dict[str, int] = {}
    code: list[_Op] = []
    for op in ops:
        if isinstance(op, str):
            labels[op] = len(code)
        else:
            code.append(op)

    def offset(target: int | str, pc: int) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - pc - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"seccomp program: jump to {target} out of range")
        return jump

    return b"".join(struct.pack("=HBBI", c, offset(jt, pc), offset(jf, pc), k)
                    for pc, (c, jt, jf, k) in enumerate(code))


def loader(filter_program: bytes, uid: int | None = None, opened: Sequence[str] = (),
           run: str | None = None) -> list[str]:
    """The argv prefix, placed before bwrap's own argv, that gives bwrap ``--seccomp FD``. As root it can first
    stage ``opened`` (``staged(N)`` is the Nth, in a mount namespace of the loader's own: bwrap resolves every
    bind source by path, and the unprivileged uid may not pass through to it, under root's home) and then, with
    ``uid``, become that uid and gid on the host with no supplementary groups (``hostuid``). ``run``, a path
    under a staged directory (``staged(N)/rel``): bwrap is run from there, so that its libraries, found
    relative to where it runs, are reachable too."""
    return [sys.executable, "-I", "-S", "-c", LOADER, *([f"uid={uid}"] if uid is not None else []),
            *(f"open={path}" for path in opened), *([f"run={run.removeprefix('/tmp/')}"] if run else []),
            filter_program.hex()]
