"""``durable.append``: the one appender of record files (harness history and rejections, session side files)."""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

import pytest

from prime_ci.errors import PersistenceError
from prime_ci.harness.refine import record_rejection, rejections
from prime_ci.harness.store import Change, HarnessStore
from prime_ci.isolation import durable
from prime_ci.isolation.redact import MASK, register


def _secret() -> str:
    value = "append-" + secrets.token_hex(12)
    register(value)
    return value


def test_records_are_appended_in_order_creating_the_file(tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    durable.append_json(log, {"n": 1, "text": "é"})
    durable.append_json(log, {"n": 2})
    durable.append(log, b"\xff raw\n", redacted=True)
    assert log.read_bytes() == '{"n": 1, "text": "é"}\n{"n": 2}\n'.encode() + b"\xff raw\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o644


def test_text_is_redacted_unless_the_caller_says_it_already_is(tmp_path: Path) -> None:
    secret = _secret()
    log = tmp_path / "rejected.jsonl"
    durable.append_json(log, {"raw": f"token {secret}"})
    durable.append(log, f"kept {secret}\n", redacted=True)
    first, second = log.read_text().splitlines()
    assert json.loads(first) == {"raw": f"token {MASK}"}
    assert second == f"kept {secret}"


def test_the_file_and_its_new_directory_entry_are_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    durable.append(tmp_path / "a.jsonl", "{}\n")
    assert synced == ["file", "dir"]  # a new file: its directory entry too
    durable.append(tmp_path / "a.jsonl", "{}\n")
    assert synced == ["file", "dir", "file"]


def test_disk_full_is_a_persistence_error_naming_the_file() -> None:
    with pytest.raises(PersistenceError, match=r"cannot append to /dev/full: .*\(disk full\)"):
        durable.append(Path("/dev/full"), "{}\n")


def test_a_missing_directory_is_a_persistence_error_naming_the_file(tmp_path: Path) -> None:
    target = tmp_path / "gone" / "history.jsonl"
    with pytest.raises(PersistenceError, match=f"cannot append to {target}"):
        durable.append(target, "{}\n")


def test_harness_history_and_rejections_go_through_the_appender(tmp_path: Path) -> None:
    secret = _secret()
    store = HarnessStore(tmp_path / "harness")
    store.apply([Change(op="create", kind="memory", name="m", content=f"remember {secret}")],
                source_run="r1", trigger="cli", rationale="why")
    history = (tmp_path / "harness" / "history.jsonl").read_text()
    assert secret not in history and MASK in history
    assert [cs.source_run for cs in store.history()] == ["r1"]
    rid = record_rejection(store, "bad plan", f"raw {secret}", source_run="r2")
    assert [(r["id"], r["raw"]) for r in rejections(store)] == [(rid, f"raw {MASK}")]
