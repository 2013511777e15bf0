"""Append-only JSONL session log in the Prime Agent v3 format, crash-safe (RELIABILITY §3.2).

One record is one ``os.write`` of a complete JSON line on an ``O_APPEND`` descriptor, so a process crash
can at worst tear the last line. Every record carries ``seq`` (header 0, then +1) and a ``crc32`` of its
value, so a reader tells a torn tail from an edited, duplicated, reordered or NUL-filled middle. The crc32 is
computed over a canonical form of the record (``session.crc``: the parsed value without ``crc32``, keys
sorted, strings ASCII-escaped, every number as the double it denotes with integral values as plain integers,
non-finite ones as null), so a writer that parses and prints the record again (JavaScript prints ``0.0`` as
``0`` and ``4.5e-05`` as ``0.000045``) keeps it valid; lines from earlier prime-ci versions, whose crc32
covers their raw bytes, still read. Records are plain JSON a JavaScript reader parses: a non-finite float is
written as null, as ``JSON.stringify`` would.
Records are written immediately (durable across a process crash) and ``fdatasync``-ed at commit points.
A failed write or fsync is fatal (``PersistenceError``) and never retried: after a failed fsync the kernel
may have dropped the dirty pages, so "retry and continue" would claim durability it does not have.

Resume (``open_for_append``) repairs the tail only: a fragment moves to ``<log>.torn``, a complete record
missing its newline gets it. Damage in the middle raises ``LogCorruptError`` unless ``salvage=True``; entries
another program appended (``SessionFile.foreign_suffix``) raise ``ForeignSuffixError``, even with salvage.
One writer per log: an exclusive ``flock`` on ``<log>.lock``, which the kernel drops when its owner dies.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prime_ci.errors import LogCorruptError, PersistenceError
from prime_ci.isolation import durable
from prime_ci.isolation.redact import redact
from prime_ci.isolation.untrusted import clean_json
from prime_ci.session.crc import record_text, signed_line
from prime_ci.session.lock import WriterLock
from prime_ci.session.read import (
    SALVAGE_TYPE,
    VERSION,
    ForeignSuffixError,
    SessionFile,
    read_session,
    read_side_file,
    scan_log,
)

__all__ = ["SALVAGE_TYPE", "VERSION", "ForeignSuffixError", "SessionFile", "SessionLog", "entry_id", "now_iso",
           "read_session", "read_side_file", "uuid7"]

CRASH_POINTS = ("before_write", "after_write", "after_sync", "after_side_save")


_EXACT = frozenset({"prime_ci.run", "prime_ci.harness"})  # read back as configuration and file contents


def _clean(fields: dict[str, Any]) -> dict[str, Any]:
    """Entry fields without terminal control sequences (gate failure text, messages between agents, tracebacks
    can carry colours); a tool call's arguments and the records in ``_EXACT`` are kept as they are."""
    if fields.get("customType") in _EXACT:
        return fields
    message = fields.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return {k: clean_json(v) for k, v in fields.items()}
    content = [p if isinstance(p, dict) and p.get("type") == "toolCall" else clean_json(p) for p in message["content"]]
    message = {k: content if k == "content" else clean_json(v) for k, v in message.items()}
    return {k: message if k == "message" else clean_json(v) for k, v in fields.items()}


def _parse_crash_at(spec: str | None) -> list[Any] | None:
    if not spec:
        return None
    point, _, count = spec.partition(":")
    if point not in CRASH_POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"PRIME_CI_CRASH_AT={spec!r}: expected <point>:<n>, n >= 1, point one of {CRASH_POINTS}")
    return [point, int(count)]


# Test seam: exit like a SIGKILL at the n-th occurrence of a durable boundary. Read once at import.
_CRASH = _parse_crash_at(os.environ.get("PRIME_CI_CRASH_AT"))


def _crash_point(point: str) -> None:
    assert _CRASH is not None
    if point == _CRASH[0]:
        _CRASH[1] -= 1
        if _CRASH[1] == 0:
            os._exit(137)


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


def _os_error(path: Path, what: str, exc: OSError) -> PersistenceError:
    return PersistenceError(f"session log {path}: {what} failed: {durable.describe(exc)}")


def _save_aside(side: Path, pieces: list[tuple[int, bytes]], reason: str) -> None:
    """Append damaged bytes to a side file: per piece a JSON line (offset, length, reason), the raw bytes, ``\\n``."""
    buf = b"".join(json.dumps({"offset": off, "length": len(raw), "reason": reason, "time": now_iso()}).encode()
                   + b"\n" + raw + b"\n" for off, raw in pieces)
    durable.append(side, buf, redacted=True)  # the log's bytes as they were
    if _CRASH:
        _crash_point("after_side_save")


class SessionLog:
    """Writer for one session file. ``append`` returns the new entry's id."""

    # Not ``durable.append``: one descriptor held open under the writer lock, seq and crc per record, a short
    # write poisons the writer, and fdatasync only at commit points (before every model call).

    def __init__(self, path: Path, fd: int, last_id: str | None, session_id: str, *, seq: int = -1, size: int = 0,
                 lock: WriterLock | None = None) -> None:
        self.path = path
        self._fd = fd
        self.last_id = last_id
        self.session_id = session_id
        self.seq = seq  # seq of the last record in the file
        self.size = size  # bytes written so far, as far as this writer knows
        self.synced_size = size  # bytes known durable (at the last commit point)
        self.entries_written = 0
        self.torn: tuple[int, int] | None = None  # (offset, length) of a tail fragment moved to <log>.torn
        self.newline_added = False  # resume completed a final record that lacked only its newline
        self.salvaged: list[tuple[int, int]] = []  # (offset, length) of middle damage moved to <log>.salvaged
        self._lock = lock
        self._dirty = False
        self._failed: str | None = None

    @classmethod
    def create(
        cls, path: Path, *, cwd: str, parent_session: str | None = None, depth: int | None = None
    ) -> SessionLog:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PersistenceError(f"cannot create {path.parent}: {durable.describe(exc)}") from exc
        session_id = uuid7()
        header: dict[str, Any] = {"type": "session", "version": VERSION, "id": session_id, "timestamp": now_iso(),
                                  "cwd": cwd}
        if parent_session is not None:
            header["parentSession"] = parent_session
        if depth is not None:
            header["rlmDepth"] = depth
        lock = WriterLock(path)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as exc:
            lock.release()
            raise PersistenceError(f"cannot create session log {path}: {exc.strerror}") from exc
        log = cls(path, fd, None, session_id, lock=lock)
        try:
            log._write(header)
            log.commit()
            durable.fsync_dir(path.parent)
        except OSError as exc:
            log._release()
            raise _os_error(path.parent, "directory fsync", exc) from exc
        except BaseException:
            log._release()
            raise
        return log

    @classmethod
    def open_for_append(cls, path: Path, *, salvage: bool = False) -> SessionLog:
        """Reopen an existing log to continue it (resume): lock, repair the tail, refuse a damaged middle.

        With ``salvage`` a damaged middle is moved to ``<log>.salvaged``, the file is rewritten atomically
        with the valid records before and after it, and a ``prime_ci.salvage`` record documents the gap.
        """
        lock = WriterLock(path)
        try:
            return cls._recover(path, lock, salvage)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _recover(cls, path: Path, lock: WriterLock, salvage: bool) -> SessionLog:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PersistenceError(f"cannot read session log {path}: {exc.strerror}") from exc
        scan = scan_log(data)
        if scan.header is None:
            raise LogCorruptError(str(path), 0, "no session header" + ("" if data.strip(b"\0") else " (empty file)"))
        damage = scan.first_damage()
        if damage is not None and not salvage:
            raise LogCorruptError(str(path), *damage)
        if scan.foreign:
            raise scan.foreign_error(path)
        entries = [entry for _, _, entry in scan.good]
        fragment = bool(scan.tail) and scan.tail_entry is None
        if fragment:
            _save_aside(path.with_name(path.name + ".torn"), [(scan.tail_offset, scan.tail)], "torn final line")
        salvaged: list[tuple[int, int]] = []
        if damage is not None:
            salvaged = scan.bad_spans()
            if salvaged:
                _save_aside(path.with_name(path.name + ".salvaged"), [(o, data[o : o + n]) for o, n in salvaged],
                            "damaged middle (salvage)")
            kept = b"".join(data[start:end] for start, end, _ in scan.good)
            kept += scan.tail + b"\n" if scan.tail_entry is not None else b""
            durable.write(path, kept, redacted=True)  # the kept records byte for byte
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise PersistenceError(f"cannot open session log {path}: {exc.strerror}") from exc
        try:
            if damage is None and scan.tail_entry is not None:
                os.write(fd, b"\n")
                os.fdatasync(fd)
            elif damage is None and fragment:
                os.ftruncate(fd, scan.tail_offset)
                os.fdatasync(fd)
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise _os_error(path, "tail repair", exc) from exc
        if scan.tail_entry is not None:
            entries.append(scan.tail_entry)
        last = entries[-1]
        seq = last["seq"] if type(last.get("seq")) is int else len(entries) - 1
        last_id = last.get("id") if last is not scan.header and isinstance(last.get("id"), str) else None
        log = cls(path, fd, last_id, str(scan.header.get("id", "")), seq=seq, size=size, lock=lock)
        log.torn = (scan.tail_offset, len(scan.tail)) if fragment else None
        log.newline_added = scan.tail_entry is not None
        log.salvaged = salvaged
        if damage is not None:
            try:
                gaps = [[a, b] for _, a, b in scan.open_gaps()]
                log.custom(SALVAGE_TYPE, {"gaps": gaps, "side_file": path.name + ".salvaged",
                                          "damaged": [[o, n] for o, n in salvaged]})
                log.commit()
            except BaseException:
                log._release()
                raise
        return log

    def append(self, type_: str, **fields: Any) -> str:
        eid = entry_id()
        entry = {"type": type_, "id": eid, "parentId": self.last_id, "timestamp": now_iso(), **_clean(fields)}
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

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise PersistenceError(f"session log {self.path} refuses writes after an earlier failure: {self._failed}")
        if self._fd < 0:
            raise PersistenceError(f"session log {self.path} is closed")

    def _write(self, entry: dict[str, Any]) -> None:
        self._check_usable()
        entry["seq"] = self.seq + 1
        # Lone surrogates become \\udcxx escapes inside their JSON string: still valid JSON and UTF-8.
        data = signed_line(redact(record_text(entry)))
        if _CRASH:
            _crash_point("before_write")
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            self._failed = f"write failed: {exc.strerror}"
            raise _os_error(self.path, "write", exc) from exc
        self.size += written
        if written != len(data):
            self._failed = f"short write ({written} of {len(data)} bytes)"
            raise PersistenceError(f"short write to session log {self.path} ({written} of {len(data)} bytes; disk "
                                   "full or file size limit): the torn record is repaired on resume")
        if _CRASH:
            _crash_point("after_write")
        self.seq += 1
        self._dirty = True
        self.entries_written += 1

    def commit(self) -> None:
        """Make everything written so far durable (a commit point)."""
        self._check_usable()
        if not self._dirty:
            return
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            self._failed = f"fdatasync failed: {exc.strerror}"
            raise _os_error(self.path, "fdatasync", exc) from exc
        self._dirty = False
        self.synced_size = self.size
        if _CRASH:
            _crash_point("after_sync")

    def close(self) -> None:
        """Commit and release the file and the lock; after an earlier failure only release."""
        if self._fd < 0:
            return
        try:
            if self._failed is None:
                self.commit()
        finally:
            self._release(remove=True)

    def _release(self, remove: bool = False) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock is not None:
            self._lock.release(remove)
