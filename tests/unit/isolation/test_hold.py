"""The model's processes are stopped while the verdict is made: every process of the run's kernel boxes, the ones
it forked away from its session too, and nothing of another box or run."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from conftest import wait_until
from prime_ci.isolation import hold
from prime_ci.isolation.box import Box, run_needle
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.procs import kill_box, proc_stat

# a kernel's cell that leaves a process of its own session running: both spin, so neither sleeps through a stop
SPIN = ("import os, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "while True: pass\n")


@contextmanager
def box_running(run: str, name: str) -> Iterator[tuple[int, int]]:
    """A box of ``run`` named ``name``, running SPIN: (its process, the process it left in another session)."""
    box = Box.create(Limits(), run=run, name=name)
    proc = subprocess.Popen([*box.launcher(), sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.pid, int(proc.stdout.readline())
    finally:
        kill_box(box, proc.pid)
        proc.wait(10)


def state(pid: int) -> str:
    info = proc_stat(pid)
    return info[0] if info else "gone"


def test_a_kernel_box_and_what_it_left_running_stop_for_the_verdict_and_go_on_after() -> None:
    run = run_needle(secrets.token_hex(8)).decode()
    other = run_needle(secrets.token_hex(8)).decode()
    with box_running(run, "kernel-1") as (kernel, left), box_running(other, "kernel-1") as (elsewhere, _):
        with hold.held(run) as count:
            wait_until(lambda: state(kernel) == "T" and state(left) == "T", what="the kernel and its leftover stopped")
            assert count >= 2
            assert state(elsewhere) != "T", "another run's kernel goes on"
        wait_until(lambda: state(kernel) != "T" and state(left) != "T", what="both going on after the verdict")
