"""``isolation/spawn.py``: the one way prime-ci starts a kernel, a gate, a child host or a bench task."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from prime_ci.isolation import spawn
from prime_ci.isolation.box import Box
from prime_ci.isolation.limits import Limits

REPORT = (
    "import os, sys\n"
    "print('SESSION', os.getsid(0) == os.getpid(), 'GROUP', os.getpgrp() == os.getpid(), flush=True)\n"
    "print('STDIN', repr(sys.stdin.read()), flush=True)\n"
    "print('TO-STDERR', file=sys.stderr, flush=True)\n"
    "print('FDS', sorted(int(f) for f in os.listdir('/proc/self/fd')), flush=True)\n"
)


def _own_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def test_popen_starts_a_new_session_reading_nothing_and_logging_both_streams(tmp_path: Path) -> None:
    log = tmp_path / "kernel.log"
    log.write_bytes(b"earlier generation\n")
    read_end, write_end = os.pipe()  # the host's own stdin has something to read: the process must not see it
    os.write(write_end, b"the host's input")
    os.close(write_end)
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        proc = spawn.popen([sys.executable, "-c", REPORT], env=dict(os.environ), out=log, cwd=tmp_path)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read_end)
    assert str(log) not in _own_fds()  # the host closed its copy once the child held it
    assert proc.wait(timeout=60) == 0
    text = log.read_text()
    assert text.startswith("earlier generation\n")  # appended
    assert "SESSION True GROUP True" in text
    assert "STDIN ''" in text and "TO-STDERR" in text
    assert "FDS [0, 1, 2, 3]" in text  # nothing of the host's leaks in (3: listdir's own)


def test_start_truncates_when_asked_and_passes_only_the_fds_given(tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    log.write_bytes(b"an earlier attempt\n")
    read_end, write_end = os.pipe()
    os.write(write_end, b"handed over")
    os.close(write_end)
    code = (f"import os\nprint('PIPE', os.read({read_end}, 100))\n"
            "print('SESSION', os.getsid(0) == os.getpid())\n")

    async def main() -> int:
        try:
            proc = await spawn.start([sys.executable, "-c", code], env=None, out=log, append=False,
                                     pass_fds=(read_end,))
        finally:
            os.close(read_end)
        return await proc.wait()

    assert asyncio.run(main()) == 0
    assert log.read_text() == "PIPE b'handed over'\nSESSION True\n"


def test_start_writes_to_a_descriptor_the_caller_owns(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()

    async def main() -> bytes:
        try:
            proc = await spawn.start(["sh", "-c", "echo out; echo err >&2"], env={"PATH": os.environ["PATH"]},
                                     out=write_end)
        finally:
            os.close(write_end)
        await proc.wait()
        with os.fdopen(read_end, "rb") as reader:
            return reader.read()

    assert asyncio.run(main()) == b"out\nerr\n"


def test_a_box_holds_from_the_first_instruction(tmp_path: Path) -> None:
    box = Box.create(Limits(file_size=4096, cgroups=False), run="", name="spawn-test")
    log = tmp_path / "boxed.log"
    code = ("import resource\nprint('FSIZE', resource.getrlimit(resource.RLIMIT_FSIZE))\n"
            "print('RTTIME', resource.getrlimit(resource.RLIMIT_RTTIME))\n")
    proc = spawn.popen([sys.executable, "-c", code], env=dict(os.environ), out=log, box=box)
    assert proc.wait(timeout=60) == 0
    text = log.read_text()
    assert "FSIZE (4096, 4096)" in text
    assert f"RTTIME {box.marker}" in text


@pytest.mark.parametrize("mode", ["popen", "start"])
def test_a_failed_start_removes_the_box_and_raises(tmp_path: Path, mode: str) -> None:
    box = Box.create(Limits(), run="", name="spawn-fail")
    if not box.cgroups():
        box.remove()
        pytest.skip("no cgroup of ours on this host: a box without one has nothing to remove")
    assert all(path.is_dir() for path in box.cgroups())
    argv = [sys.executable, "-c", "pass"]
    with pytest.raises(FileNotFoundError):
        if mode == "popen":
            spawn.popen(argv, env={}, out=tmp_path / "log", box=box, cwd=tmp_path / "missing")
        else:
            asyncio.run(spawn.start(argv, env={}, out=tmp_path / "gone" / "log", box=box))
    assert not any(path.exists() for path in box.cgroups())
