"""Append-only JSONL session log in the Prime Agent v3 format.

One record is one ``os.write`` of a complete JSON line on an ``O_APPEND`` descriptor, so a process crash
can at worst tear the last line. Records are written immediately (durable across a process crash) and
``fdatasync``-ed at commit points: before every model call and at the end of the run. A failed write or
fsync is fatal (``PersistenceError``) and never retried: after a failed fsync the kernel may have dropped
the dirty pages, so "retry and continue" would claim durability it does not have.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prime_ci.errors import LogCorruptError, PersistenceError
from prime_ci.redact import redact

VERSION = 3


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def uuid7() -> str:
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(secrets.token_bytes(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64 | 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def entry_id() -> str:
    return secrets.token_hex(4)


class SessionLog:
    """Writer for one session file. ``append`` returns the new entry's id."""

    def __init__(self, path: Path, fd: int, last_id: str | None, session_id: str) -> None:
        self.path = path
        self._fd = fd
        self.last_id = last_id
        self.session_id = session_id
        self._dirty = False
        self.entries_written = 0

    @classmethod
    def create(
        cls, path: Path, *, cwd: str, parent_session: str | None = None, depth: int | None = None
    ) -> SessionLog:
        path.parent.mkdir(parents=True, exist_ok=True)
        session_id = uuid7()
        header: dict[str, Any] = {
            "type": "session",
            "version": VERSION,
            "id": session_id,
            "timestamp": now_iso(),
            "cwd": cwd,
        }
        if parent_session is not None:
            header["parentSession"] = parent_session
        if depth is not None:
            header["rlmDepth"] = depth
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as exc:
            raise PersistenceError(f"cannot create session log {path}: {exc.strerror}") from exc
        log = cls(path, fd, None, session_id)
        log._write(header)
        log.commit()
        _fsync_dir(path.parent)
        return log

    def append(self, type_: str, **fields: Any) -> str:
        eid = entry_id()
        entry = {"type": type_, "id": eid, "parentId": self.last_id, "timestamp": now_iso(), **fields}
        self._write(entry)
        self.last_id = eid
        return eid

    def message(self, role: str, content: list[dict[str, Any]], **extra: Any) -> str:
        msg = {"role": role, "content": content, "timestamp": int(time.time() * 1000), **extra}
        return self.append("message", message=msg)

    def custom(self, custom_type: str, data: dict[str, Any]) -> str:
        return self.append("custom", customType=custom_type, data=data)

    def custom_message(self, custom_type: str, content: str, details: dict[str, Any] | None = None) -> str:
        fields: dict[str, Any] = {"customType": custom_type, "content": content, "display": True}
        if details is not None:
            fields["details"] = details
        return self.append("custom_message", **fields)

    def _write(self, entry: dict[str, Any]) -> None:
        data = (redact(json.dumps(entry, ensure_ascii=False, separators=(",", ":"))) + "\n").encode()
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            raise PersistenceError(f"cannot write session log {self.path}: {exc.strerror}") from exc
        if written != len(data):
            raise PersistenceError(f"short write to session log {self.path} ({written}/{len(data)} bytes)")
        self._dirty = True
        self.entries_written += 1

    def commit(self) -> None:
        """Make everything written so far durable (a commit point)."""
        if not self._dirty:
            return
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise PersistenceError(f"fsync of session log {self.path} failed: {exc.strerror}") from exc
        self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.commit()
            finally:
                os.close(self._fd)
                self._fd = -1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class SessionFile:
    """A parsed session: header, entries, and what was wrong with the file."""

    header: dict[str, Any]
    entries: list[dict[str, Any]]
    torn_tail: bytes = b""
    bad_lines: list[tuple[int, str]] = field(default_factory=list)

    def messages(self) -> Iterator[dict[str, Any]]:
        for entry in self.entries:
            if entry.get("type") == "message":
                yield entry["message"]

    def last_custom(self, custom_type: str) -> dict[str, Any] | None:
        for entry in reversed(self.entries):
            if entry.get("type") == "custom" and entry.get("customType") == custom_type:
                data: dict[str, Any] = entry.get("data", {})
                return data
        return None


def read_session(path: Path, *, strict: bool = False) -> SessionFile:
    """Parse a session file. A torn last line (no newline) is set aside, never fatal.

    A malformed line that *is* newline-terminated means damage in the middle (not a process crash):
    with ``strict`` that raises ``LogCorruptError`` naming the offset; otherwise it is reported in
    ``bad_lines`` and skipped (for display).
    """
    data = path.read_bytes()
    body, sep, tail = data.rpartition(b"\n")
    if not sep:
        body, tail = b"", data
    header: dict[str, Any] | None = None
    entries: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    offset = 0
    for raw in body.split(b"\n") if body else []:
        start = offset
        offset += len(raw) + 1
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict) or "type" not in obj:
                raise ValueError("not a session entry")
        except ValueError as exc:
            if strict:
                raise LogCorruptError(str(path), start, str(exc)[:120]) from None
            bad.append((start, str(exc)[:120]))
            continue
        if header is None and obj["type"] == "session":
            header = obj
        else:
            entries.append(obj)
    if header is None:
        if strict:
            raise LogCorruptError(str(path), 0, "no session header")
        header = {"type": "session", "version": VERSION, "id": "", "timestamp": "", "cwd": ""}
    return SessionFile(header=header, entries=entries, torn_tail=tail, bad_lines=bad)
