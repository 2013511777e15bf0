"""Issue 24 items 9 and 10: the seccomp filter refuses every call of an explicit list kept here, apart from the
filter's own tables, with the syscall numbers of the kernel ABI written out: a call dropped from the filter's
list or given a wrong number makes this test fail (the older test loops over the filter's own list)."""

from __future__ import annotations

import errno

import pytest

from prime_ci.isolation import seccomp
from test_sandbox_root import run_filter  # the BPF interpreter

# name: (x86_64, aarch64); None where the architecture has no such call
MUST_REFUSE_EPERM: dict[str, tuple[int, int | None]] = {
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "pidfd_getfd": (438, 438),
    "kcmp": (312, 272), "personality": (135, 92),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105), "finit_module": (313, 273),
    "delete_module": (176, 106), "open_by_handle_at": (304, 265), "setns": (308, 268),
    "reboot": (169, 142), "swapon": (167, 224), "swapoff": (168, 225), "syslog": (103, 116), "acct": (163, 89),
    "quotactl": (179, 60), "quotactl_fd": (443, 443), "iopl": (172, None), "ioperm": (173, None),
}
MUST_REFUSE_ENOSYS: dict[str, tuple[int, int]] = {
    "clone3": (435, 435), "openat2": (437, 437), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
}
AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# calls every program makes: a filter that refused them would break everything, not protect anything
MUST_ALLOW: dict[str, tuple[int, int]] = {"read": (0, 63), "write": (1, 64), "getpid": (39, 172),
                                          "execve": (59, 221), "mmap": (9, 222), "exit_group": (231, 94)}


@pytest.mark.parametrize(("machine", "column"), [("x86_64", 0), ("aarch64", 1)])
def test_every_call_of_the_explicit_list_is_refused(machine: str, column: int) -> None:
    program = seccomp.program(machine)
    assert program is not None
    audit = AUDIT[machine]
    for name, numbers in MUST_REFUSE_EPERM.items():
        if numbers[column] is not None:
            assert run_filter(program, audit, numbers[column]) == seccomp.RET_ERRNO | errno.EPERM, name
    for name, numbers in MUST_REFUSE_ENOSYS.items():
        assert run_filter(program, audit, numbers[column]) == seccomp.RET_ERRNO | errno.ENOSYS, name
    for name, numbers in MUST_ALLOW.items():
        assert run_filter(program, audit, numbers[column]) == seccomp.RET_ALLOW, name
