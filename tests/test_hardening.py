"""Issue 17: hostile repository settings, bad inputs and edges that must end with their documented exit code,
one clear line and nothing left behind (through the CLI: exit codes, a private TMPDIR, a full disk; the rest is in
process: tests/runs/isolation/test_hardening_runs.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo, run_cli, run_prime
from prime_ci.gates import protect
from prime_ci.isolation.worktree import Worktree
from prime_ci.testing import ScriptedServer, ipython, reply

LOCAL = ["--model", "openai/scripted", "--api-base", "http://127.0.0.1:9/v1"]


def private_tmp(tmp_path: Path) -> dict[str, str]:
    """A TMPDIR of the test's own, where prime-ci makes its worktrees: a leak shows there."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp_path / "tmp")}


@pytest.mark.parametrize("task", ["", "   \n\t ", "\x00\x01\x02binary\x00"])
def test_empty_and_binary_tasks_exit_2(tmp_path: Path, buggy_repo: Path, task: str) -> None:
    proc = run_cli(["run", str(buggy_repo), "--task", task.replace("\x00", "\x01"), *LOCAL], cwd=tmp_path)
    assert proc.returncode == 2 and "task" in proc.stderr.strip().splitlines()[-1], proc.stderr
    task_file = tmp_path / "task.bin"
    task_file.write_bytes(task.encode() + bytes(range(256)) * 4 if task.strip() else task.encode())
    proc = run_cli(["run", str(buggy_repo), "--task-file", str(task_file), *LOCAL], cwd=tmp_path)
    assert proc.returncode == 2 and "--task-file" in proc.stderr, proc.stderr


def test_an_unknown_provider_exits_2_before_cloning(tmp_path: Path) -> None:
    proc = run_cli(["run", str(tmp_path / "no-such-repo"), "--task", "x", "--model", "foo/bar"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "unknown provider 'foo'" in last and "no-such-repo" not in proc.stderr, proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the repository to another user")
def test_a_repository_owned_by_another_user_keeps_gits_reason_whole(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 65534, 65534)
    proc = run_cli(["run", str(repo), "--task", "x", *LOCAL], cwd=tmp_path, env=private_tmp(tmp_path))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "dubious ownership" in last and "safe.directory" in last, proc.stderr
    assert not list((tmp_path / "tmp").iterdir())


@contextlib.contextmanager
def small_fs(path: Path, size: str, *, readonly: bool = False) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if readonly else "")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip("needs to mount a tmpfs (root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_an_unusable_out_is_exit_6_in_one_line_leaving_nothing(tmp_path: Path, buggy_repo: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with small_fs(tmp_path / "ro", "1m", readonly=True) as readonly, small_fs(tmp_path / "full", "64k") as full:
        (full / "filler").write_bytes(b"x" * 60_000)
        for out in (tmp_path / "a-file" / "out", readonly / "out", full / "out"):
            with ScriptedServer([reply("done")]) as srv:
                env = private_tmp(tmp_path)
                proc = run_cli(["run", str(buggy_repo), "--task", "x", "--model", "openai/x", "--api-base", srv.url,
                                "--out", str(out)], cwd=tmp_path, env=env)
            assert proc.returncode == 6, (out, proc.stderr)
            errors = [line for line in proc.stderr.splitlines() if not line.startswith("prime-ci: ")]
            assert not errors, proc.stderr  # one line of ours, no traceback
            assert not list((tmp_path / "tmp").iterdir()), "a worktree or bridge dir was left behind"


def test_a_disk_filled_after_the_fix_is_not_success(tmp_path: Path, buggy_repo: Path) -> None:
    fill = ("from pathlib import Path\nPath('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n"
            "try:\n    with open('filler.bin', 'wb') as f:\n        while True:\n            f.write(b'x' * 65536)\n"
            "except OSError as e:\n    print('full', e.errno)\n")
    short = Path(tempfile.mkdtemp(prefix="pcfull-"))  # the kernel's IPC socket path must stay under 108 bytes
    with small_fs(short, "24m") as small, ScriptedServer([ipython(fill), reply("done")]) as srv:
        run = run_prime(tmp_path, buggy_repo, srv, "--sandbox", "off", env={"TMPDIR": str(small)})
    assert run.code != 0 and run.result["success"] is False, run.proc.stderr
    assert "patch" in run.result["detail"], run.result["detail"]


def test_hidden_changes_are_protected_unless_allowed(tmp_path: Path) -> None:
    wt = Worktree(tmp_path, tmp_path / ".git", "0" * 40, tmp_path, str(tmp_path))
    hidden = ["conftest.py", "vendor/shadow.py"]
    verdict = protect.check(wt, [], [], ["vendor/*"], hidden)
    assert verdict.protected == ["conftest.py (hidden from the patch by .gitignore)"]
    assert protect.check(wt, [], [], [], hidden).protected == [f"{p} (hidden from the patch by .gitignore)"
                                                                for p in hidden]


def test_only_processes_a_child_started_can_be_signalled() -> None:
    from prime_ci.children.auth import descends_from

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert descends_from(child.pid, os.getpid())
        assert not descends_from(os.getpid(), child.pid)
        assert not descends_from(1, child.pid)
    finally:
        child.kill()
        child.wait()
