"""Run a command where user namespaces are refused, as in a container whose seccomp profile forbids them.

``python no_userns.py ARGV...``, as root: the command runs in a user namespace of its own that maps uids and
gids 0 and 65534 to themselves, with ``user.max_user_namespaces`` set to 0 there, so that neither it nor anything
it starts (bwrap) can make another. The host's own setting is left alone. Exits with the command's status.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

CLONE_NEWUSER = 0x10000000
MAPPED = "0 0 1\n65534 65534 1\n"


def main(argv: list[str]) -> int:
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER) != 0:
            sys.stderr.write(f"no_userns: unshare: {os.strerror(ctypes.get_errno())}\n")
            os._exit(127)
        os.write(ready_w, b"u")
        os.read(mapped_r, 1)
        Path("/proc/sys/user/max_user_namespaces").write_text("0\n")
        os.execvp(argv[0], argv)
    os.read(ready_r, 1)
    for name in ("uid_map", "gid_map"):
        Path(f"/proc/{pid}/{name}").write_text(MAPPED)
    os.write(mapped_w, b"m")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
