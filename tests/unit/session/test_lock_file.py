"""Issue 23 item 7: a closed session log leaves no ``.lock`` file among the artifacts, and the lock still
keeps a second writer out while the first one holds it, including one that opened the file before it went."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from prime_ci.errors import PersistenceError
from prime_ci.session.log import SessionLog


def test_closing_removes_the_lock_and_resume_takes_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    lock = path.with_name("session.jsonl.lock")
    log = SessionLog.create(path, cwd="/")
    assert lock.is_file()
    with pytest.raises(PersistenceError, match="is locked by"):
        SessionLog.open_for_append(path)
    log.custom("x", {})
    log.close()
    assert not lock.exists(), "the finished writer removed its lock file"
    again = SessionLog.open_for_append(path)
    assert lock.is_file()
    again.close()
    assert not lock.exists()


def test_a_lock_on_the_removed_file_is_not_taken(tmp_path: Path) -> None:
    """A writer that opened the lock file just before the holder removed it must not end up holding a lock
    that a third writer, creating the file anew, also holds."""
    path = tmp_path / "session.jsonl"
    first = SessionLog.create(path, cwd="/")
    stale = os.open(path.with_name("session.jsonl.lock"), os.O_RDWR)  # opened before the holder is done
    try:
        first.close()
        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old file's lock is free now ...
        second = SessionLog.open_for_append(path)  # ... but the path's lock is a new file: taken
        with pytest.raises(PersistenceError, match="is locked by"):
            SessionLog.open_for_append(path)
        second.close()
    finally:
        os.close(stale)
