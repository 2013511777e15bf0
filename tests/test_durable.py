"""Issue 14: one durable writer, and a run whose artifacts cannot all be written still ends cleanly (exit 6).

The writer's failures are real ones (a directory where the file goes, a file where its directory goes,
RLIMIT_FSIZE in a child process); ENOSPC is an os-level fault injection on the temp file only.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import FIX, PYTEST_GATE, run_prime
from prime_ci.artifacts.schemas import ResultModel
from prime_ci.errors import PersistenceError
from prime_ci.gates.junit import write_gates_junit
from prime_ci.gates.runner import GateResult
from prime_ci.isolation import durable
from prime_ci.isolation.redact import MASK, register
from prime_ci.testing import ScriptedServer, ipython, reply


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _secret() -> str:
    value = "durable-" + secrets.token_hex(12)
    register(value)
    return value


# ---- the writer ----


def test_write_replaces_the_file_whole_with_mode_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "result.json"
    durable.write(target, "old\n")
    durable.write_json(target, {"a": "é"})
    assert json.loads(target.read_text(encoding="utf-8")) == {"a": "é"}
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    durable.write(target, b"\x00\xff binary", redacted=True, mode=0o755)
    assert target.read_bytes() == b"\x00\xff binary" and stat.S_IMODE(target.stat().st_mode) == 0o755
    assert _leftovers(target.parent) == []


def test_directory_in_place_of_the_file_is_a_persistence_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").mkdir()
    (tmp_path / "junit.xml" / "keep").write_text("x")
    with pytest.raises(PersistenceError) as info:
        durable.write(tmp_path / "junit.xml", "<testsuites/>")
    message = str(info.value)
    assert message == f"cannot write {tmp_path / 'junit.xml'}: Is a directory" and "\n" not in message
    assert info.value.exit_code == 6
    assert (tmp_path / "junit.xml" / "keep").read_text() == "x" and _leftovers(tmp_path) == []


def test_file_in_place_of_the_directory_is_a_persistence_error(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a directory")
    with pytest.raises(PersistenceError, match=r"cannot write .*out/summary\.md: "):
        durable.write(tmp_path / "out" / "summary.md", "# hi\n")


def test_disk_full_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "summary.md"
    durable.write(target, "old summary\n")
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(PersistenceError, match=r"summary\.md: No space left on device \(disk full\)$"):
        durable.write(target, "new summary\n" * 1000)
    monkeypatch.undo()
    assert target.read_text() == "old summary\n" and _leftovers(tmp_path) == []


FSIZE_CHILD = r"""
import resource, signal, sys
from pathlib import Path
from prime_ci.isolation import durable
from prime_ci.errors import PersistenceError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    durable.write(Path(sys.argv[1]), "y" * 100_000)
except PersistenceError as exc:
    print(exc)
    sys.exit(exc.exit_code)
"""


def test_file_size_limit_in_a_real_process_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "patch.diff"
    durable.write(target, "old patch\n")
    proc = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(target)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 6, proc.stderr
    assert proc.stdout.strip() == f"cannot write {target}: File too large (file size limit reached)"
    assert "Traceback" not in proc.stderr
    assert target.read_text() == "old patch\n" and _leftovers(tmp_path) == []


def test_text_is_redacted_unless_the_caller_says_it_already_is(tmp_path: Path) -> None:
    secret = _secret()
    durable.write(tmp_path / "a.md", f"key={secret}\n")
    durable.write(tmp_path / "b.bin", f"key={secret}\n".encode() + b"\xff\xfe")
    durable.write_json(tmp_path / "c.json", {"detail": secret})
    durable.write(tmp_path / "d.log", f"key={secret}\n", redacted=True)
    assert (tmp_path / "a.md").read_text() == f"key={MASK}\n"
    assert (tmp_path / "b.bin").read_bytes() == f"key={MASK}\n".encode() + b"\xff\xfe"
    assert json.loads((tmp_path / "c.json").read_text()) == {"detail": MASK}
    assert secret in (tmp_path / "d.log").read_text()


def test_sync_false_skips_both_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_fsync = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting)
    durable.write(tmp_path / "cells.ipynb", "{}", sync=False)
    assert calls == []
    durable.write(tmp_path / "cells.ipynb", "{}")
    assert len(calls) == 2  # the file, then its directory


def test_redaction_sweep_masks_files_keeps_modes_and_finishes_past_a_file_it_cannot_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = _secret()
    child = tmp_path / "children" / "c1"
    child.mkdir(parents=True)
    (child / "session.jsonl").write_text(f'{{"leak": "{secret}"}}\n')
    (child / "run.sh").write_text(f"echo {secret}\n")
    (child / "run.sh").chmod(0o750)
    (tmp_path / "clean.txt").write_text("nothing here\n")
    assert sorted(p.name for p in durable.redact_tree(tmp_path)) == ["run.sh", "session.jsonl"]
    assert secret not in (child / "session.jsonl").read_text() and MASK in (child / "run.sh").read_text()
    assert stat.S_IMODE((child / "run.sh").stat().st_mode) == 0o750
    assert (tmp_path / "clean.txt").read_text() == "nothing here\n"

    late = [tmp_path / "a-late.log", tmp_path / "children" / "z-late.log"]
    for path in late:
        path.write_text(f"{secret}\n")
    real_replace = os.replace

    def read_only(src: str, dst: str) -> None:
        if str(dst) == str(late[0]):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", read_only)
    with pytest.raises(PersistenceError, match=r"a-late\.log: Read-only file system"):
        durable.redact_tree(tmp_path)
    assert secret in late[0].read_text() and secret not in late[1].read_text()
    assert _leftovers(tmp_path) == []


def _gate(name: str, output: str) -> GateResult:
    return GateResult(name=name, command="pytest -q", passed=False, exit_code=1, timed_out=False, output=output,
                      output_bytes=len(output), duration_s=0.1, attempts=1, flaky=False, log_path=Path("x.log"))


def test_junit_is_redacted_and_an_unwritable_junit_is_a_persistence_error(tmp_path: Path) -> None:
    secret = _secret()
    write_gates_junit([_gate("pytest", f"AssertionError: token {secret}")], tmp_path / "junit.xml")
    text = (tmp_path / "junit.xml").read_text()
    assert secret not in text and MASK in text
    (tmp_path / "dir" / "junit.xml").mkdir(parents=True)
    with pytest.raises(PersistenceError, match=r"junit\.xml: Is a directory"):
        write_gates_junit([_gate("pytest", "boom")], tmp_path / "dir" / "junit.xml")
    assert _leftovers(tmp_path / "dir") == []


# ---- a run whose artifacts cannot all be written ----


def _session(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "session.jsonl").read_text().splitlines()]


def _worktree_root(session: list[dict[str, Any]]) -> Path:
    record = next(e for e in session if e.get("customType") == "prime_ci.run")
    return Path(record["data"]["worktree"]["root"])


def _assert_clean_exit_6(proc: subprocess.CompletedProcess[str], out: Path, culprit: str) -> list[dict[str, Any]]:
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert f"artifact not written: cannot write {out / culprit}" in proc.stderr
    session = _session(out)
    stop = session[-1]
    assert stop["customType"] == "prime_ci.stop"
    assert stop["data"]["stop_reason"] == "persistence_error" and stop["data"]["exit_code"] == 6
    assert culprit in stop["data"]["detail"]
    assert not _worktree_root(session).exists(), "the worktree was left behind"
    assert "persistence_error" in (out / "summary.md").read_text()
    assert (out / "patch.diff").is_file() and _leftovers(out) == []
    return session


def _run(
    tmp_path: Path, repo: Path, server: ScriptedServer, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """A fixing run with a gate into OUT, prepared by the caller (the last ``--out`` wins)."""
    return run_prime(tmp_path, repo, server, "--gate", PYTEST_GATE, *extra, "--out", str(out)).proc


@pytest.fixture
def fixing(server: ScriptedServer) -> ScriptedServer:
    server.add(ipython(FIX), reply("Fixed add()."))
    return server


def test_run_with_a_directory_named_junit_xml_ends_with_exit_6_and_every_other_artifact(
    tmp_path: Path, buggy_repo: Path, fixing: ScriptedServer
) -> None:
    out = tmp_path / "out"
    (out / "junit.xml").mkdir(parents=True)
    proc = _run(tmp_path, buggy_repo, fixing, out)
    _assert_clean_exit_6(proc, out, "junit.xml")
    result = json.loads((out / "result.json").read_text())
    model = ResultModel.model_validate(result)
    assert model.stop_reason == "persistence_error" and model.exit_code == 6 and not model.success
    assert str(out / "junit.xml") in result["detail"] and "the run had ended with completed" in result["detail"]
    assert model.gates[0].passed and model.changed_files == ["calc.py"]
    assert "+    return a + b" in (out / "patch.diff").read_text()
    assert (out / "cells.ipynb").is_file() and (out / "junit.xml").is_dir()


def test_run_with_a_directory_named_result_json_prints_the_result_and_exits_6(
    tmp_path: Path, buggy_repo: Path, fixing: ScriptedServer
) -> None:
    out = tmp_path / "out"
    (out / "result.json").mkdir(parents=True)
    proc = _run(tmp_path, buggy_repo, fixing, out, "--json")
    _assert_clean_exit_6(proc, out, "result.json")
    printed = json.loads(proc.stdout)
    ResultModel.model_validate(printed)
    assert printed["stop_reason"] == "persistence_error" and printed["exit_code"] == 6
    assert str(out / "result.json") in printed["detail"]
    assert (out / "junit.xml").is_file() and str(out / "result.json") in (out / "summary.md").read_text()


def test_run_whose_gate_logs_cannot_be_written_ends_with_exit_6(
    tmp_path: Path, buggy_repo: Path, fixing: ScriptedServer
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "gates").write_text("a file where the gate logs go\n")
    proc = _run(tmp_path, buggy_repo, fixing, out)
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "persistence_error" and "gate logs" in result["detail"]
    session = _session(out)
    assert session[-1]["data"]["exit_code"] == 6 and not _worktree_root(session).exists()


def test_an_out_that_is_a_file_is_one_line_exit_6_and_no_worktree_left(
    tmp_path: Path, buggy_repo: Path, fixing: ScriptedServer
) -> None:
    out, temp = tmp_path / "out", tmp_path / "tmp"
    out.write_text("a file, not a directory\n")
    temp.mkdir()
    proc = run_prime(tmp_path, buggy_repo, fixing, "--out", str(out), env={"TMPDIR": str(temp)}).proc
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == f"prime-ci: error: cannot create {out}: File exists"
    assert not list(temp.glob("prime-ci-wt-*")), "the worktree was left behind"
