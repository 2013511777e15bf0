"""Crash safety of the session log (RELIABILITY §3.2, §9.1 D1–D8, §9.8 F1): real processes, real files.

The only fakes are os-level fault injections that §9.1 prescribes (``os.write`` raising ENOSPC or writing
short, ``os.fdatasync`` raising EIO). The oracle for "committed" is what the writer itself reports after each
commit point: the seq, the byte range it made durable and a hash of those bytes read back from the file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_until
from prime_ci.errors import LogCorruptError, PersistenceError
from prime_ci.session.lock import process_start_time
from prime_ci.session.log import SALVAGE_TYPE, SessionLog, read_session, read_side_file

WRITER = r"""
import hashlib, os, random, sys
from pathlib import Path
from prime_ci.errors import PersistenceError
from prime_ci.session.log import SessionLog

path, report, seed, count, big = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
rep = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
log = SessionLog.create(path, cwd="/w")
reader = os.open(path, os.O_RDONLY)

def committed(start):
    chunk = os.pread(reader, log.synced_size - start, start)
    line = f"{log.seq} {start} {log.synced_size} {hashlib.sha256(chunk).hexdigest()}\n"
    os.write(rep, line.encode())
    return log.synced_size

start = committed(0)
try:
    for i in range(count):
        size = rng.choice([40, 300, 5_000]) if rng.random() > big / 100 else rng.randint(200_000, 2_000_000)
        log.custom("prime_ci.test", {"i": i, "pad": "x" * size})
        log.commit()
        start = committed(start)
    log.close()
except PersistenceError as exc:
    print(exc, file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    return {**env, **extra}


def _started(proc: subprocess.Popen[bytes], report: Path) -> bool:
    """The writer has committed a record; failing at once (with its stderr) if it died first."""
    if report.exists() and report.stat().st_size > 0:
        return True
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    return False


def _writer(path: Path, report: Path, *, seed: int = 0, count: int = 10**6, big: int = 0,
            env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[bytes]:  # fmt: skip
    argv = [sys.executable, "-c", WRITER, str(path), str(report), str(seed), str(count), str(big)]
    return subprocess.Popen(argv, env=env or _env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def _reported(report: Path) -> list[tuple[int, int, int, str]]:
    if not report.exists():
        return []
    out = []
    for line in report.read_bytes().split(b"\n")[:-1]:  # an unterminated report line was never finished
        seq, start, end, digest = line.decode().split()
        out.append((int(seq), int(start), int(end), digest))
    return out


def _recover_and_check(path: Path, report: Path) -> str:
    """Resume a crashed log and check the invariants; returns "torn", "newline", "clean" or "empty"."""
    committed = _reported(report)
    before = path.read_bytes()
    tail = before[before.rfind(b"\n") + 1 :]
    if not committed and not before.split(b"\n")[0].endswith(b"}"):
        with pytest.raises(LogCorruptError, match="no session header"):
            SessionLog.open_for_append(path)
        return "empty"
    torn_side = path.with_name(path.name + ".torn")
    side_before = read_side_file(torn_side) if torn_side.exists() else []
    log = SessionLog.open_for_append(path)
    after = path.read_bytes()
    for seq, start, end, digest in committed:
        assert hashlib.sha256(after[start:end]).hexdigest() == digest, f"committed record {seq} lost or changed"
    if committed:
        assert log.seq >= committed[-1][0]
    if not tail:
        outcome, expected = "clean", before
        assert log.torn is None and not log.newline_added
    elif log.newline_added:
        outcome, expected = "newline", before + b"\n"
        assert log.torn is None
    else:
        outcome, expected = "torn", before[: -len(tail)]
        assert log.torn == (len(expected), len(tail))
        side = read_side_file(torn_side)
        assert side[-1][1] == tail and side[-1][0]["offset"] == len(expected) and len(side) == len(side_before) + 1
    assert after == expected
    eid = log.custom("prime_ci.resumed", {"after": outcome})
    log.close()
    session = read_session(path, strict=True)
    assert session.entries[-1]["id"] == eid and session.torn_tail == b"" and not session.bad_lines
    assert [e["seq"] for e in session.entries] == list(range(1, len(session.entries) + 1))
    return outcome


def _kill_trials(tmp_path: Path, trials: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    committed_total = 0
    for trial in range(trials):
        work = tmp_path / f"t{trial}"
        work.mkdir()
        path, report = work / "session.jsonl", work / "report"
        proc = _writer(path, report, seed=trial, big=rng.choice([0, 10, 30]))
        wait_until(lambda p=proc, r=report: _started(p, r), timeout=30, what="the writer's first committed record",
                   interval=0.002)
        time.sleep(rng.uniform(0, 0.06))  # the random kill point: fault injection, not synchronisation
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
        committed_total += len(_reported(report))
        outcome = _recover_and_check(path, report)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        shutil.rmtree(work)
    print(f"\nD1: {trials} SIGKILL trials, {committed_total} committed records checked, 0 lost; outcomes {outcomes}")
    return outcomes


def test_d1_sigkill_at_random_times_loses_no_committed_record(tmp_path: Path) -> None:
    outcomes = _kill_trials(tmp_path, 100, seed=1)
    assert sum(outcomes.values()) == 100


@pytest.mark.nightly
def test_d1_sigkill_sweep_nightly(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    markexpr = request.config.option.markexpr or ""
    if "nightly" not in markexpr or "not nightly" in markexpr:
        pytest.skip("nightly sweep: run with -m nightly")
    outcomes = _kill_trials(tmp_path, 1000, seed=2)
    assert outcomes.get("torn", 0) + outcomes.get("newline", 0) > 0, "no torn tail in 1,000 kills: not exercised"


@pytest.mark.parametrize("n", range(1, 6))
@pytest.mark.parametrize("point", ["before_write", "after_write", "after_sync"])
def test_d2_crash_seam_at_every_write_point(tmp_path: Path, point: str, n: int) -> None:
    path, report = tmp_path / "session.jsonl", tmp_path / "report"
    proc = _writer(path, report, count=8, env=_env(PRIME_CI_CRASH_AT=f"{point}:{n}"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 137, err
    # the n-th write is the record with seq n - 1; the writer reports a record only after its commit returned
    assert [seq for seq, *_ in _reported(report)] == list(range(n - 1))
    outcome = _recover_and_check(path, report)
    assert outcome == ("empty" if (point, n) == ("before_write", 1) else "clean")
    assert _recover_and_check(path, report) == outcome, "recovery is idempotent"


def _make_log(path: Path, records: int = 12) -> list[bytes]:
    log = SessionLog.create(path, cwd="/w")
    for i in range(records):
        log.custom("prime_ci.test", {"i": i, "text": f"record {i} " + "y" * (i * 7)})
        log.commit()
    log.close()
    return path.read_bytes().splitlines(keepends=True)


def test_d2_crash_during_tail_repair_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    lines = _make_log(path)
    path.write_bytes(b"".join(lines) + b'{"type":"custom","id":"0')
    code = "import sys; from pathlib import Path; from prime_ci.session.log import SessionLog; " \
           "SessionLog.open_for_append(Path(sys.argv[1]))"  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, str(path)], env=_env(PRIME_CI_CRASH_AT="after_side_save:1"))
    assert proc.returncode == 137
    assert path.read_bytes() == b"".join(lines) + b'{"type":"custom","id":"0', "crashed before changing the log"
    log = SessionLog.open_for_append(path)
    log.close()
    assert path.read_bytes() == b"".join(lines)
    side = read_side_file(path.with_name("session.jsonl.torn"))
    assert [raw for _, raw in side] == [b'{"type":"custom","id":"0'] * 2, "both attempts kept the fragment"


def test_d4_every_cut_of_the_last_record(tmp_path: Path) -> None:
    src = tmp_path / "src.jsonl"
    lines = _make_log(src, records=4)
    prefix, last = b"".join(lines[:-1]), lines[-1]
    last_id = json.loads(last)["id"]
    for cut in range(1, len(last)):
        path = tmp_path / f"cut{cut}" / "session.jsonl"
        path.parent.mkdir()
        data = prefix + last[:cut]
        path.write_bytes(data)
        os.utime(path, ns=(1, 1))
        for strict in (False, True):
            session = read_session(path, strict=strict)
            complete = cut == len(last) - 1
            assert session.torn_tail == (b"" if complete else last[:cut]) and session.unterminated == complete
            assert len(session.entries) == (4 if complete else 3) and not session.bad_lines
        assert path.read_bytes() == data and path.stat().st_mtime_ns == 1, "a read-only open mutated the file"
        log = SessionLog.open_for_append(path)
        if complete:
            assert path.read_bytes() == prefix + last and log.last_id == last_id and log.newline_added
        else:
            assert path.read_bytes() == prefix and log.torn == (len(prefix), cut)
            assert log.last_id == json.loads(lines[-2])["id"]
            [(info, raw)] = read_side_file(path.with_name("session.jsonl.torn"))
            assert raw == last[:cut] and (info["offset"], info["length"], info["reason"]) == (len(prefix), cut,
                                                                                         "torn final line")  # fmt: skip
        log.custom("prime_ci.resumed", {})
        log.close()
        assert read_session(path, strict=True).entries[-1]["customType"] == "prime_ci.resumed"


@pytest.mark.parametrize("tail", [b"\0" * 300, b"\0" * 50 + b'{"type":"cu', b"DUP"], ids=["nul", "nul+frag", "dup"])
def test_d4_tails_that_are_not_the_next_record_are_set_aside(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "session.jsonl"
    lines = _make_log(path)
    if tail == b"DUP":
        tail = lines[3].rstrip(b"\n")  # a complete, valid record, but not the next one in sequence
    path.write_bytes(b"".join(lines) + tail)
    assert read_session(path, strict=True).torn_tail == tail
    log = SessionLog.open_for_append(path)
    log.close()
    assert path.read_bytes() == b"".join(lines) and log.torn == (len(b"".join(lines)), len(tail))


def _corrupt_cases(lines: list[bytes], rng: random.Random) -> list[tuple[str, bytes, int, int, int]]:
    """(kind, damaged file, offset of the first damaged line, start, end of the damaged bytes)."""
    data = b"".join(lines)
    starts = [sum(map(len, lines[:i])) for i in range(len(lines))]
    cases = []
    for k in range(3):
        line = rng.randrange(3, len(lines) - 4)
        length = rng.randint(200, 700)
        at = starts[line] + (0 if k == 0 else rng.randrange(1, len(lines[line]) - 1))
        damaged = data[:at] + b"\0" * length + data[at + length :]
        end = damaged.index(b"\n", at + length) + 1
        cases.append(("nul-overwrite", damaged, starts[line], starts[line], end))
    line = rng.randrange(3, len(lines) - 4)
    inserted = data[: starts[line]] + b"\0" * 400 + data[starts[line] :]
    cases.append(("nul-insert", inserted, starts[line], starts[line], starts[line + 1] + 400))
    broken = data[: starts[line]] + lines[line][1:] + data[starts[line + 1] :]
    cases.append(("json", broken, starts[line], starts[line], starts[line + 1] - 1))
    dup = data[: starts[line + 1]] + lines[line] + data[starts[line + 1] :]
    cases.append(("duplicate", dup, starts[line + 1], starts[line + 1], starts[line + 1] + len(lines[line])))
    return cases


def test_d5_a_well_formed_line_whose_crc_no_longer_matches_is_read_as_rewritten(tmp_path: Path) -> None:
    """Another writer (Prime Agent's fork) rewrote a line and kept its crc32: read and marked, never hidden; a
    flipped bit that leaves the line well-formed reads the same way (only unparseable lines are damage)."""
    src = tmp_path / "src.jsonl"
    lines = _make_log(src, records=30)
    data = src.read_bytes()
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    flipped = bytearray(data)
    flipped[starts[10] + lines[10].index(b"record") + 1] ^= 0x01
    path = tmp_path / "session.jsonl"
    path.write_bytes(bytes(flipped))
    session = read_session(path, strict=True)
    assert not session.bad_lines and session.rewritten == [11]
    assert len(session.entries) == len(read_session(src).entries)
    log = SessionLog.open_for_append(path)
    log.custom("prime_ci.resumed", {})
    log.close()
    assert read_session(path, strict=True).rewritten == [11]


def test_d5_middle_damage_is_refused_then_salvaged(tmp_path: Path) -> None:
    rng = random.Random(5)
    src = tmp_path / "src.jsonl"
    lines = _make_log(src, records=30)
    for i, (kind, damaged, offset, start, end) in enumerate(_corrupt_cases(lines, rng)):
        path = tmp_path / f"c{i}" / "session.jsonl"
        path.parent.mkdir()
        path.write_bytes(damaged)
        with pytest.raises(LogCorruptError) as info:
            SessionLog.open_for_append(path)
        assert info.value.offset == offset and str(path) in str(info.value), kind
        with pytest.raises(LogCorruptError):
            read_session(path, strict=True)
        display = read_session(path)
        assert [o for o, _ in display.bad_lines] == [offset], kind
        assert bool(display.nul_runs) == kind.startswith("nul")
        assert path.read_bytes() == damaged, "refusing must not touch the file"

        log = SessionLog.open_for_append(path, salvage=True)
        log.close()
        assert log.salvaged == [(start, end - start)], kind
        [(side_info, side_raw)] = read_side_file(path.with_name("session.jsonl.salvaged"))
        assert side_raw == damaged[start:end] and side_info["offset"] == start
        kept = damaged[:start] + damaged[end:]
        result = path.read_bytes()
        assert result.startswith(kept), f"{kind}: valid prefix and suffix kept byte for byte"
        record = json.loads(result[len(kept) :])
        assert record["customType"] == SALVAGE_TYPE and record["data"]["damaged"] == [[start, end - start]]
        kept_seqs = [json.loads(x)["seq"] for x in kept.splitlines()]
        missing = sorted(set(range(31)) - set(kept_seqs))
        assert record["data"]["gaps"] == ([[missing[0] - 1, missing[-1] + 1]] if missing else []), kind
        session = read_session(path, strict=True)
        assert [e["seq"] for e in session.entries] == [*kept_seqs[1:], 31]
        again = SessionLog.open_for_append(path)
        again.custom("prime_ci.resumed", {})
        again.close()
        assert read_session(path, strict=True).entries[-1]["seq"] == 32


def test_d5_deleted_middle_line_is_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    lines = _make_log(path)
    path.write_bytes(b"".join(lines[:5] + lines[6:]))
    with pytest.raises(LogCorruptError, match="seq jumps from 4 to 6") as info:
        SessionLog.open_for_append(path)
    assert info.value.offset == len(b"".join(lines[:5]))
    assert read_session(path).seq_gaps == [(info.value.offset, 4, 6)]
    log = SessionLog.open_for_append(path, salvage=True)
    log.close()
    assert log.salvaged == [] and not path.with_name("session.jsonl.salvaged").exists()
    assert read_session(path, strict=True).entries[-1]["data"]["gaps"] == [[4, 6]]


OWNER = "import sys, threading; from pathlib import Path; from prime_ci.session.log import SessionLog; " \
        "log = SessionLog.create(Path(sys.argv[1]), cwd='/'); log.custom('x', {}); print('ready', flush=True); " \
        "threading.Event().wait()"  # fmt: skip


def test_d6_second_writer_is_refused_until_the_owner_dies(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(path)], stdout=subprocess.PIPE, env=_env())
    try:
        assert owner.stdout is not None and owner.stdout.readline() == b"ready\n"
        with pytest.raises(PersistenceError, match=rf"is locked by pid {owner.pid}$") as info:
            SessionLog.open_for_append(path)
        assert info.value.exit_code == 6
        with pytest.raises(PersistenceError, match=rf"locked by pid {owner.pid}$"):
            SessionLog.create(path, cwd="/")
        assert len(read_session(path).entries) == 1, "readers do not need the lock"
    finally:
        owner.kill()
        owner.wait()
        assert owner.stdout is not None
        owner.stdout.close()
    log = SessionLog.open_for_append(path)
    assert json.loads(path.with_name("session.jsonl.lock").read_text())["pid"] == os.getpid()
    log.custom("y", {})
    log.close()
    assert [e["customType"] for e in read_session(path, strict=True).entries] == ["x", "y"]


def test_d6_stale_lock_files_do_not_block(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    lock = path.with_name("session.jsonl.lock")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(json.dumps({"pid": int(dead.stdout), "start_time": "1", "host": os.uname().nodename}))
    SessionLog.create(path, cwd="/").close()
    reused = {"pid": os.getpid(), "start_time": str(int(process_start_time(os.getpid()) or 0) + 1)}
    lock.write_text(json.dumps({**reused, "host": os.uname().nodename}))
    SessionLog.open_for_append(path).close()
    # the lock is held by a live process whose record names a dead pid (e.g. it inherited the descriptor)
    holder = "import fcntl, os, sys, threading; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); " \
             "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, sys.argv[2].encode()); " \
             "print('ready', flush=True); threading.Event().wait()"  # fmt: skip
    stale = json.dumps({"pid": int(dead.stdout), "start_time": "1", "host": os.uname().nodename})
    proc = subprocess.Popen([sys.executable, "-c", holder, str(lock), stale], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        with pytest.raises(PersistenceError, match=rf"locked by pid {int(dead.stdout)} \(no longer running"):
            SessionLog.open_for_append(path)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("mode", ["enospc", "short"])
def test_d7_disk_full_on_the_nth_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int, mode: str) -> None:
    path = tmp_path / "session.jsonl"
    log = SessionLog.create(path, cwd="/")
    for i in range(3):
        log.custom("committed", {"i": i})
    log.commit()
    durable = path.read_bytes()
    real_write, calls = os.write, [0]

    def full(fd: int, data: bytes) -> int:
        calls[0] += 1
        if calls[0] < n:
            return real_write(fd, data)
        if mode == "short":
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    for i in range(n - 1):
        log.custom("unsynced", {"i": i})
    with pytest.raises(PersistenceError, match="disk full" if mode == "enospc" else "short write") as info:
        log.custom("fails", {"pad": "z" * 1000})
    assert info.value.exit_code == 6
    with pytest.raises(PersistenceError, match="refuses writes"):
        log.custom("later", {})
    monkeypatch.undo()
    log.close()
    data = path.read_bytes()
    assert data.startswith(durable) and data.count(b"\n") == durable.count(b"\n") + n - 1
    assert (data.endswith(b"\n")) == (mode == "enospc")
    tail = data[data.rfind(b"\n") + 1 :]
    resumed = SessionLog.open_for_append(path)
    assert resumed.torn == (None if mode == "enospc" else (len(data) - len(tail), len(tail)))
    resumed.custom("after", {})
    resumed.close()
    assert [e["customType"] for e in read_session(path, strict=True).entries][-1] == "after"


def test_d7_file_size_limit_tears_a_record_that_resume_repairs(tmp_path: Path) -> None:
    path, report = tmp_path / "session.jsonl", tmp_path / "report"
    limit = 64 * 1024

    def limit_fsize() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = _writer(path, report, count=100, big=0, preexec_fn=limit_fsize)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 6, err
    assert b"short write" in err or b"file size limit" in err, err
    assert path.stat().st_size == limit
    assert _recover_and_check(path, report) == "torn"


def test_d8_failed_fdatasync_is_fatal_and_never_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "session.jsonl"
    log = SessionLog.create(path, cwd="/")
    log.custom("committed", {})
    log.commit()
    log.custom("pending", {})
    calls: list[int] = []

    def eio(fd: int) -> None:
        calls.append(fd)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(PersistenceError, match="fdatasync failed") as info:
        log.commit()
    assert info.value.exit_code == 6
    size = path.stat().st_size
    with pytest.raises(PersistenceError, match="refuses writes"):
        log.custom("success", {})
    with pytest.raises(PersistenceError, match="refuses writes"):
        log.commit()
    log.close()
    assert len(calls) == 1, "fsync must not be retried"
    assert path.stat().st_size == size and b"success" not in path.read_bytes()


def _mutations(valid: bytes, rng: random.Random) -> bytes:
    lines = valid.splitlines(keepends=True)
    kind = rng.randrange(10)
    if kind == 0:
        return rng.randbytes(rng.randrange(400))
    if kind == 1:
        return valid[: rng.randrange(len(valid))]
    if kind == 2:
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 3:
        at = rng.randrange(len(valid))
        return valid[:at] + b"\0" * rng.randint(1, 700) + valid[at:]
    if kind == 4:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"".join(lines)
    if kind == 5:
        del lines[rng.randrange(len(lines))]
        return b"".join(lines)
    if kind == 6:
        return b"".join(lines[:3]) + rng.choice([b"[" * 50_000, b"{" * 50_000, b'"\xff\xfe"', b"\xef\xbb\xbf{}",
                                                 b"1" * 5000, b'{"type":1}', b'{"type":"x","seq":-1}'])  # fmt: skip
    if kind == 7:
        at = rng.randrange(len(valid))
        return valid[:at] + rng.randbytes(rng.randrange(1, 40)) + valid[at:]
    if kind == 8:
        return b"\n".join(rng.randbytes(rng.randrange(30)) for _ in range(rng.randrange(20)))
    return valid + rng.randbytes(rng.randrange(1, 60))


def test_f1_arbitrary_bytes_give_records_or_log_corrupt_error(tmp_path: Path) -> None:
    rng = random.Random(11)
    src = tmp_path / "src.jsonl"
    log = SessionLog.create(src, cwd="/w")
    log.message("user", [{"type": "text", "text": "héllo \u2028 \x00 end"}])
    for i in range(8):
        log.custom("prime_ci.test", {"i": i, "f": 1.5, "n": None, "nested": [{"a": [i]}]})
    log.close()
    valid = src.read_bytes()
    stats = {"ok": 0, "corrupt": 0, "resumed": 0}
    for case in range(3000):
        path = tmp_path / "fuzz.jsonl"
        data = _mutations(valid, rng)
        path.write_bytes(data)
        display = read_session(path)
        assert all(isinstance(e, dict) and isinstance(e.get("type"), str) for e in display.entries)
        try:
            session = read_session(path, strict=True)
        except LogCorruptError as exc:
            assert 0 <= exc.offset <= len(data)
            stats["corrupt"] += 1
        else:
            assert session.header["type"] == "session" and not session.bad_lines and not session.seq_gaps
            stats["ok"] += 1
        assert path.read_bytes() == data
        if case % 10 == 0:
            for side in tmp_path.glob("fuzz.jsonl.*"):
                side.unlink()
            try:
                resumed = SessionLog.open_for_append(path, salvage=case % 20 == 0)
            except LogCorruptError:
                continue
            resumed.custom("prime_ci.resumed", {})
            resumed.close()
            assert read_session(path, strict=True).entries[-1]["customType"] == "prime_ci.resumed"
            stats["resumed"] += 1
    print(f"\nF1: 3000 inputs: {stats}")
    assert stats["ok"] and stats["corrupt"] and stats["resumed"]
