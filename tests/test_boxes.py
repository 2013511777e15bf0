"""Boxes at unit level: a cgroup limit counts only where it was written, the run's needle names the run its boxes
belong to, and a sweep finds the run's processes by it and removes the run's cgroups."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from conftest import wait_until
from prime_ci.isolation import cgroups
from prime_ci.isolation.box import RUN_VAR, Box, run_needle, run_of
from prime_ci.isolation.cgroups import Hierarchy, writable_limits
from prime_ci.isolation.limits import MIB, Limits
from prime_ci.isolation.procs import proc_stat, sweep

MEMORY = 384 * MIB


def _box(root: Path, *, memory_writable: bool) -> tuple[Box, Path]:
    """A box whose cgroup (v2, pids and memory on) is a plain directory; memory.max a directory when the write to
    it must fail (EISDIR: refused even to root)."""
    path = root / "run" / "box"
    path.mkdir(parents=True)
    (path / "cgroup.controllers").write_text("pids memory\n")
    for name in ("pids.max", "memory.swap.max"):
        (path / name).write_text("max\n")
    if memory_writable:
        (path / "memory.max").write_text("max\n")
    else:
        (path / "memory.max").mkdir()
    box = Box(Limits(pids=100, memory=MEMORY), [(Hierarchy(root, 2, frozenset({"pids", "memory"})), path)], (1, 2))
    box._set_limits()
    return box, path


def test_a_memory_limit_the_cgroup_refused_falls_back_to_rlimit_data(tmp_path: Path) -> None:
    box, path = _box(tmp_path, memory_writable=False)
    assert box.controlled("memory") == [] and box.controlled("pids") == [path]
    assert (path / "pids.max").read_text() == "100"
    assert (path / "memory.swap.max").read_text() == "max\n", "swap was set around a limit that is not there"
    assert f"DATA={MEMORY}:{MEMORY}" in box.launcher()


def test_a_written_memory_limit_needs_no_rlimit(tmp_path: Path) -> None:
    box, path = _box(tmp_path, memory_writable=True)
    assert box.controlled("memory") == [path]
    assert (path / "memory.max").read_text() == str(MEMORY) and (path / "memory.swap.max").read_text() == "0"
    assert not [arg for arg in box.launcher() if arg.startswith("DATA=")]


def test_the_probe_keeps_only_controllers_whose_limit_it_could_write(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir()
    (v2 / "pids.max").write_text("100\n")
    (v2 / "memory.max").mkdir()
    assert writable_limits(v2, frozenset({"pids", "memory"})) == {"pids"}
    assert (v2 / "pids.max").read_text() == "max", "the probe sets no limit"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text("1024\n")
    assert writable_limits(v1, frozenset({"memory"})) == {"memory"}
    assert (v1 / "memory.limit_in_bytes").read_text() == "-1"


def test_the_needle_names_the_run_its_boxes_belong_to() -> None:
    assert run_needle("abc") == b"PRIME_CI_RUN=abc" == run_of({RUN_VAR: "abc", "PATH": "/bin"}).encode()
    assert run_of({}) == ""


def test_a_sweep_finds_the_runs_processes_even_without_its_variable(tmp_path: Path) -> None:
    """One process keeps the run's variable, one drops it (``env -i``): the second is found by its box (cgroup
    and rlimit marker), which only works if the box was made for the run the needle names."""
    marker = secrets.token_hex(8)
    env = {"PATH": os.environ["PATH"], RUN_VAR: marker}
    box = Box.create(Limits(), run=run_of(env), name="test")
    procs = [subprocess.Popen([*box.launcher(), *argv, "sleep", "infinity"], env=env, start_new_session=True)
             for argv in ([], ["env", "-i"])]
    try:
        wait_until(lambda: all(Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep") for p in procs),
                   timeout=30, what="both processes run sleep")
        assert run_needle(marker) not in Path(f"/proc/{procs[1].pid}/environ").read_bytes()
        assert sweep(run_needle(marker)) == 2
        for p in procs:
            p.poll()
            assert proc_stat(p.pid) is None, "a process of the run outlived the sweep"
        assert cgroups.run_cgroups(run_of(env)) == [], "the run's cgroups are left"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
