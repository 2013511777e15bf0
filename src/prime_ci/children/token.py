"""A child's bridge token, from the root to the child host: over an inherited pipe, never the environment.

The environment a process was started with stays readable in ``/proc/PID/environ`` for its whole life (popping
the variable does not erase it), so with ``--sandbox off`` a cell of the same user could read the token there and
speak for the child on the children's bridge. The root writes the token into a pipe and hands the child host only
the read end (its number is in ``FD_VAR``); the child host makes itself undumpable (its ``/proc/PID/environ``,
``mem`` and ``fd/`` closed to other processes of its user) before it reads the token and closes the pipe.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from prime_ci.isolation.dumpable import make_undumpable

FD_VAR = "PRIME_CI_CHILD_TOKEN_FD"  # the number of the inherited descriptor, not the token
MAX_TOKEN = 256


def hand_over(token: str) -> int:
    """A pipe holding ``token`` (its write end closed): the read end, for ``pass_fds``; the caller closes it once
    the child is started."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, token.encode())  # a few bytes: far below the pipe's buffer, never blocks
    finally:
        os.close(write_end)
    return read_end


def claim(environ: MutableMapping[str, str]) -> str:
    """In the child host, first of all: become undumpable, refuse to go on under a tracer that attached before,
    then read the token from the descriptor ``environ`` names (empty without one) and close it."""
    make_undumpable()
    tracer = _tracer()
    if tracer:
        raise SystemExit(f"prime-ci child: traced by process {tracer}: refusing to take the bridge token")
    number = environ.pop(FD_VAR, None)
    if number is None:
        return ""
    fd = int(number)
    try:
        data = b""
        while chunk := os.read(fd, MAX_TOKEN):
            data += chunk
    finally:
        os.close(fd)
    return data.decode()


def _tracer() -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0
