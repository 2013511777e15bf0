"""Issue 37: a disk a cell fills is exit 6 (persistence_error) with the artifacts written, not exit 70.

The worktree (and with it git's index) lives on a small tmpfs mounted for the test, ``--out`` on it or not; the
cell fixes the bug, touches a file git tracks (so the next ``git diff`` refreshes the index and must write it)
and writes until the disk is full. The run's next git call then fails for want of space: that is a full disk
(exit 6), as every other write that fails for want of space is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FIX, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply

FILL = FIX + """
import os
os.utime('test_calc.py')
try:
    with open('filler.bin', 'wb') as f:
        while True:
            f.write(b'x' * 65536)
except OSError as e:
    print('full', e.errno)
"""


@pytest.fixture
def small_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 16 MiB tmpfs where this process makes its temporary directories (the run's worktree among them)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a size-limited tmpfs")
    path = Path(tempfile.mkdtemp(prefix="pcfull-"))  # short: the kernel's IPC socket paths stay under 108 bytes
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("out_on_it", [False, True], ids=["out-elsewhere", "out-on-the-full-disk"])
def test_a_disk_filled_by_a_cell_is_exit_6(tmp_path: Path, buggy_repo: Path, small_disk: Path,
                                          out_on_it: bool) -> None:
    out = small_disk / "out" if out_on_it else tmp_path / "out"
    with ScriptedServer([ipython(FILL), reply("done")]) as server:
        run = run_inproc(tmp_path, buggy_repo, server, "--sandbox", "off", "--gate", "true", "--out", str(out))
    assert run.code == 6, run.proc.stderr
    assert "Traceback" not in run.proc.stderr + run.proc.stdout
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "persistence_error" and "disk full" in result["detail"], result["detail"]
    assert (out / "summary.md").is_file() and (out / "patch.diff").is_file()
    assert not list(small_disk.glob("prime-ci-wt-*")), "the worktree was left behind"


def test_a_disk_full_before_the_clone_is_exit_6_in_one_line(tmp_path: Path, buggy_repo: Path,
                                                             small_disk: Path) -> None:
    with (small_disk / "filler.bin").open("wb") as f, pytest.raises(OSError):
        while True:
            f.write(b"x" * 65536)
    with ScriptedServer([reply("done")]) as server:
        run = run_inproc(tmp_path, buggy_repo, server, "--sandbox", "off", "--out", str(tmp_path / "out"))
    assert run.code == 6, run.proc.stderr
    assert run.proc.stderr.count("\n") == 1 and "disk full" in run.proc.stderr, run.proc.stderr
    assert not server.chat_requests and not list(small_disk.glob("prime-ci-wt-*"))
