"""Starting a process: what the four spawners (a kernel generation, a gate attempt, a child host, a bench task)
share, in one place.

Every process starts in a session of its own (its group is signalled and killed as one, a terminal's signals
do not reach it), reads ``/dev/null``, and writes stdout and stderr to one sink: a log file opened here and
closed in the host as soon as the process holds it, or a descriptor the caller owns. Given a box, it starts
behind the box's launcher (cgroups joined and rlimits set before the command's first instruction), and the
box is removed if the start fails. What runs (sandbox wrapping included), its environment, the descriptors it
inherits and how it is stopped stay the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import IO

from prime_ci.isolation.box import Box


@contextlib.contextmanager
def _sink(out: Path | int, append: bool) -> Iterator[IO[bytes] | int]:
    if isinstance(out, int):
        yield out
        return
    with open(out, "ab" if append else "wb") as log:
        yield log


def _argv(argv: Sequence[str], box: Box | None) -> list[str]:
    return [*box.launcher(), *argv] if box is not None else list(argv)


def popen(argv: Sequence[str], *, env: dict[str, str] | None, out: Path | int, append: bool = True,
          cwd: str | Path | None = None, box: Box | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` (see the module's docstring); ``out``: a log file (appended to unless ``append=False``)
    or a descriptor."""
    try:
        with _sink(out, append) as sink:
            return subprocess.Popen(_argv(argv, box), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    except BaseException:
        if box is not None:
            box.remove()
        raise


async def start(argv: Sequence[str], *, env: dict[str, str] | None, out: Path | int, append: bool = True,
                cwd: str | Path | None = None, box: Box | None = None, pass_fds: Collection[int] = (),
                preexec_fn: Callable[[], None] | None = None) -> asyncio.subprocess.Process:
    """``popen`` for asyncio, with descriptors to pass and a function to run in the child before exec."""
    try:
        with _sink(out, append) as sink:
            return await asyncio.create_subprocess_exec(
                *_argv(argv, box), cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=sink,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True, pass_fds=pass_fds, preexec_fn=preexec_fn)
    except BaseException:
        if box is not None:
            box.remove()
        raise
