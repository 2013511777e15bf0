"""Reading session logs: one linear pass that classifies every line (valid, damaged, torn tail, foreign).

Used read-only by ``read_session`` (display, replay, refine) and by ``SessionLog.open_for_append`` to decide
what to repair. Arbitrary bytes yield valid records, a report of what is wrong, or ``LogCorruptError``.

A log prime-ci wrote (its header carries ``crc32``) checks every record's checksum (``session.crc``) and
``seq``. Another program that continues the file, as Prime Agent does when it resumes a prime-ci session,
appends entries without either: such a *foreign suffix* (records without ``crc32`` or ``seq`` after the last
checksummed one, each with a new ``id`` and a ``parentId`` naming an earlier entry, or null for a new root)
is read as entries and reported in ``SessionFile.foreign_suffix``, not as damage. The suffix ends the file
(a torn fragment aside): a record without ``crc32`` that any other line follows is damage ("crc32 missing").
"""

from __future__ import annotations

import bisect
import contextlib
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.errors import ConfigError, LogCorruptError
from prime_ci.session.crc import record_crc
from prime_ci.session.tree import Branches, branches

VERSION = 3
SALVAGE_TYPE = "prime_ci.salvage"
_CRC_SUFFIX = re.compile(rb',"crc32":"([0-9a-f]{8})"\}')
_NULS = re.compile(rb"\0+")


def read_side_file(side: Path) -> list[tuple[dict[str, Any], bytes]]:
    """The pieces saved in a ``.torn`` or ``.salvaged`` file: (info, raw bytes)."""
    data, pos, out = side.read_bytes(), 0, []
    while pos < len(data):
        end = data.index(b"\n", pos)
        info = json.loads(data[pos:end])
        out.append((info, data[end + 1 : end + 1 + info["length"]]))
        pos = end + 2 + info["length"]
    return out


class _Bad(Exception):
    pass


REWRITTEN = "__prime_ci_rewritten"  # set on an entry read from a line whose crc32 no longer matches (popped again)


def _parse(raw: bytes) -> dict[str, Any]:
    """One record, its checksum verified when it carries one, or ``_Bad`` with the reason. A well-formed entry
    whose checksum does not match was rewritten by another writer (Prime Agent's fork rewrites usage into the
    message line and keeps the old crc32): it is read, marked ``REWRITTEN`` for the caller to say so."""
    if b"\0" in raw:
        raise _Bad(f"{raw.count(0)} NUL bytes")
    try:
        text = raw.decode("utf-8")
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Bad(f"invalid JSON: {str(exc)[:100]}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise _Bad("not a session entry")
    if "crc32" in obj:
        try:
            valid = obj["crc32"] == record_crc(text) or _legacy_crc_ok(raw, obj["crc32"])
        except (ValueError, RecursionError):
            valid = False
        if not valid:
            obj[REWRITTEN] = True
    seq = obj.get("seq")
    if seq is not None and (type(seq) is not int or seq < 0):
        raise _Bad(f"invalid seq {str(seq)[:20]}")
    return obj


def _legacy_crc_ok(raw: bytes, crc: Any) -> bool:
    """Records written before the canonical checksum: crc32 of the line's own bytes up to a final ``crc32``."""
    match = _CRC_SUFFIX.fullmatch(raw, max(0, len(raw) - 20))
    return (match is not None and crc == match[1].decode()
            and zlib.crc32(raw[: match.start()] + b"}") == int(match[1], 16))


class ForeignSuffixError(ConfigError):
    """The log ends with entries another program (Prime Agent) appended after prime-ci's last record; prime-ci
    does not continue a conversation another agent has taken over (exit 2: nothing was started or changed)."""

    def __init__(self, path: str, count: int, offset: int, first_id: str) -> None:
        super().__init__(
            f"{path}: another program appended {count} entr{'y' if count == 1 else 'ies'} (without checksums, "
            f"from byte {offset}, first id {first_id}) after prime-ci's last record; prime-ci does not continue "
            "a session another agent has taken over. Inspect it with `prime-ci show`; continue it with the program "
            "that wrote them.")
        self.path = path
        self.count = count
        self.offset = offset
        self.first_id = first_id


@dataclass
class LogScan:
    header: dict[str, Any] | None = None
    good: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # start, end (after \n), entry
    bad: list[tuple[int, int, str]] = field(default_factory=list)  # start, end, reason; in file order
    gaps: list[tuple[int, int, int]] = field(default_factory=list)  # offset of the record after, seq before, seq
    accepted: set[tuple[int, int]] = field(default_factory=set)  # gaps declared by a salvage record
    tail_offset: int = 0
    tail: bytes = b""
    tail_entry: dict[str, Any] | None = None  # the tail is a complete record missing only its newline
    nul_runs: list[tuple[int, int]] = field(default_factory=list)
    foreign: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # another writer's suffix
    checksummed: bool = False  # the header carries crc32: prime-ci wrote this log
    rewritten: list[int] = field(default_factory=list)  # offsets of well-formed lines whose crc32 no longer matches

    def open_gaps(self) -> list[tuple[int, int, int]]:
        return [g for g in self.gaps if (g[1], g[2]) not in self.accepted]

    def first_damage(self) -> tuple[int, str] | None:
        found = [(start, reason) for start, _, reason in self.bad[:1]]
        found += [(off, f"seq jumps from {a} to {b}: records missing") for off, a, b in self.open_gaps()[:1]]
        return min(found) if found else None

    def bad_spans(self) -> list[tuple[int, int]]:
        spans: list[list[int]] = []
        for start, end, _ in self.bad:
            if spans and spans[-1][1] == start:
                spans[-1][1] = end
            else:
                spans.append([start, end])
        return [(start, end - start) for start, end in spans]

    def foreign_error(self, path: Path | str) -> ForeignSuffixError:
        start, _, entry = self.foreign[0]
        return foreign_error(path, len(self.foreign), start, entry)


def foreign_error(path: Path | str, count: int, offset: int, first: dict[str, Any]) -> ForeignSuffixError:
    return ForeignSuffixError(str(path), count, offset, str(first.get("id")))


def _bad_line(scan: LogScan, nul_starts: list[int], start: int, end: int, reason: str) -> None:
    i = bisect.bisect_left(nul_starts, start)
    nul = f" at byte {nul_starts[i]}" if i < len(nul_starts) and nul_starts[i] < end else ""
    scan.bad.append((start, end, f"{reason}{nul}"))


def scan_log(data: bytes) -> LogScan:
    """Classify every line of a log in one linear pass."""
    scan = LogScan(nul_runs=[(m.start(), m.end() - m.start()) for m in _NULS.finditer(data)] if b"\0" in data else [])
    *lines, scan.tail = data.split(b"\n")
    offset, prev = 0, -1
    nul_starts = [start for start, _ in scan.nul_runs]
    pending: list[tuple[int, int, dict[str, Any]]] = []  # records without crc32 since the last checksummed one
    for raw in lines:
        start, offset = offset, offset + len(raw) + 1
        try:
            entry = _parse(raw)
            if entry.pop(REWRITTEN, False):
                scan.rewritten.append(start)
            if scan.checksummed and "crc32" not in entry:
                pending.append((start, offset, entry))
                continue
            seq = entry.get("seq")
            if scan.checksummed and seq is not None and prev >= 0 and seq <= prev:
                raise _Bad(f"seq {seq} after {prev}: duplicated or reordered record")
        except _Bad as exc:
            _bad_line(scan, nul_starts, start, offset, str(exc))
            pending = _not_a_suffix(scan, nul_starts, pending)
            continue
        pending = _not_a_suffix(scan, nul_starts, pending)
        if not scan.good and entry["type"] == "session":
            scan.header, scan.checksummed = entry, "crc32" in entry
        if scan.checksummed and seq is not None:
            if prev >= 0 and seq > prev + 1:
                scan.gaps.append((start, prev, seq))
            prev = seq
        if entry["type"] == "custom" and entry.get("customType") == SALVAGE_TYPE:
            info = entry.get("data")
            gaps = info.get("gaps") if isinstance(info, dict) else None
            for gap in gaps if isinstance(gaps, list) else []:
                if isinstance(gap, list) and len(gap) == 2 and all(type(x) is int for x in gap):
                    scan.accepted.add((gap[0], gap[1]))
        scan.good.append((start, offset, entry))
    scan.tail_offset = offset
    if scan.tail:
        with contextlib.suppress(_Bad):
            entry = _parse(scan.tail)
            if entry.pop(REWRITTEN, False):
                scan.rewritten.append(offset)
            seq = entry.get("seq")
            if scan.checksummed and "crc32" not in entry:
                pending.append((offset, offset + len(scan.tail), entry))
                scan.tail_entry = entry
            elif not scan.checksummed or seq is None or prev < 0 or seq == prev + 1:
                scan.tail_entry = entry
                pending = _not_a_suffix(scan, nul_starts, pending)
        if not scan.good and scan.tail_entry is not None and scan.tail_entry["type"] == "session":
            scan.header = scan.tail_entry
    _foreign_suffix(scan, pending, nul_starts)
    scan.bad.sort()
    return scan


def _not_a_suffix(scan: LogScan, nul_starts: list[int], pending: list[tuple[int, int, dict[str, Any]]]) -> list[Any]:
    """Records without crc32 that another line follows: not a suffix another writer appended, but damage."""
    for start, end, _ in pending:
        _bad_line(scan, nul_starts, start, end, "crc32 missing")
    return []


def _foreign_suffix(scan: LogScan, pending: list[tuple[int, int, dict[str, Any]]], nul_starts: list[int]) -> None:
    """Keep the crc-less records after the last checksummed one that continue the entry tree; the rest is damage."""
    known = {e["id"] for _, _, e in scan.good if isinstance(e.get("id"), str)}
    for start, end, entry in pending:
        eid, parent = entry.get("id"), entry.get("parentId", "")
        if "seq" in entry:
            reason = "crc32 missing"
        elif not isinstance(eid, str) or not eid or eid in known:
            reason = "crc32 missing, and no new id"
        elif parent is not None and parent not in known:
            reason = f"crc32 missing, and parentId {str(parent)[:40]!r} names no earlier entry"
        else:
            known.add(eid)
            scan.foreign.append((start, end, entry))
            continue
        if entry is scan.tail_entry:
            scan.tail_entry = None  # a record that is neither ours nor a continuation: the tail is a fragment
        else:
            _bad_line(scan, nul_starts, start, end, reason)


@dataclass
class SessionFile:
    """A parsed session: header, entries (in file order), and what was wrong with the file."""

    header: dict[str, Any]
    entries: list[dict[str, Any]]
    torn_tail: bytes = b""  # an unterminated final fragment, ignored
    bad_lines: list[tuple[int, str]] = field(default_factory=list)  # (offset, reason), skipped
    seq_gaps: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, seq before, seq after), undeclared
    nul_runs: list[tuple[int, int]] = field(default_factory=list)  # (offset, length) anywhere in the file
    unterminated: bool = False  # the last entry is complete but lacks its newline
    foreign_suffix: list[dict[str, Any]] = field(default_factory=list)  # the last entries, appended by another
    foreign_offset: int | None = None  # byte offset of the first of them
    checksummed: bool = False  # prime-ci wrote the log (its header carries crc32)
    path: Path | None = None
    lines: list[int] = field(default_factory=list)  # the line number (1-based) of each entry, as ``entries``
    rewritten: list[int] = field(default_factory=list)  # line numbers another writer rewrote (crc32 no longer matches)

    @property
    def foreign_start(self) -> int:
        """Index in ``entries`` of the first entry of the foreign suffix (``len(entries)`` without one)."""
        return len(self.entries) - len(self.foreign_suffix)

    def check_no_foreign_suffix(self) -> None:
        """Raise ``ForeignSuffixError`` when another program continued the log after prime-ci's last record."""
        if self.foreign_suffix:
            raise foreign_error(str(self.path), len(self.foreign_suffix), self.foreign_offset or 0,
                                self.foreign_suffix[0])

    def branches(self) -> Branches:
        """The active branch and the entries off it, as indices into ``entries`` (``session.tree``)."""
        return branches(self.entries)

    def active_path(self) -> list[dict[str, Any]]:
        """The entries of the active branch, root first: the leaf (the last entry of the file) and its ancestors."""
        return [self.entries[i] for i in self.branches().path]

    def messages(self) -> Iterator[dict[str, Any]]:
        """The messages of the active branch, in order."""
        for entry in self.active_path():
            if entry.get("type") == "message" and isinstance(entry.get("message"), dict):
                yield entry["message"]

    def last_custom(self, custom_type: str) -> dict[str, Any] | None:
        for entry in reversed(self.entries):
            if entry.get("type") == "custom" and entry.get("customType") == custom_type:
                data: dict[str, Any] = entry.get("data", {})
                return data
        return None


def parts_text(parts: Any) -> str:
    """The text of a message's content: a string, or the ``text`` parts of a content-part list."""
    if isinstance(parts, str):
        return parts
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text")


def read_session(path: Path, *, strict: bool = False, data: bytes | None = None) -> SessionFile:
    """Parse a session file without modifying it. A torn last line (no newline) is set aside, never fatal.

    Damage in the middle (a malformed, NUL-filled, crc-mismatched, duplicated or reordered line, or missing
    records) is not a process crash: with ``strict`` that raises ``LogCorruptError`` naming the offset;
    otherwise it is reported (``bad_lines``, ``seq_gaps``, ``nul_runs``) and skipped, for display. Entries
    another program appended after prime-ci's last record are not damage: they are read, and also listed in
    ``foreign_suffix`` (``check_no_foreign_suffix`` refuses them for a caller about to continue the log).
    ``data``: the file's bytes, when the caller read them (``isolation.confined``).
    """
    data = path.read_bytes() if data is None else data
    scan = scan_log(data)
    if strict:
        if scan.header is None:
            raise LogCorruptError(str(path), 0, "no session header")
        if (damage := scan.first_damage()) is not None:
            raise LogCorruptError(str(path), *damage)
    entries = [entry for _, _, entry in scan.good]
    offsets = [start for start, _, _ in scan.good]
    if scan.tail_entry is not None and not scan.foreign:
        entries.append(scan.tail_entry)
        offsets.append(scan.tail_offset)
    foreign = [entry for _, _, entry in scan.foreign]
    entries += foreign
    offsets += [start for start, _, _ in scan.foreign]
    header = scan.header
    if header is None:
        header = {"type": "session", "version": VERSION, "id": "", "timestamp": "", "cwd": ""}
    else:
        entries, offsets = entries[1:], offsets[1:]
    return SessionFile(header=header, entries=entries, torn_tail=b"" if scan.tail_entry is not None else scan.tail,
                       bad_lines=[(start, reason) for start, _, reason in scan.bad], seq_gaps=scan.open_gaps(),
                       nul_runs=scan.nul_runs, unterminated=scan.tail_entry is not None, foreign_suffix=foreign,
                       foreign_offset=scan.foreign[0][0] if scan.foreign else None, checksummed=scan.checksummed,
                       path=path, lines=_line_numbers(data, offsets),
                       rewritten=_line_numbers(data, scan.rewritten))  # fmt: skip


def _line_numbers(data: bytes, offsets: list[int]) -> list[int]:
    """The 1-based line number at each byte offset (offsets in file order), in one pass over ``data``."""
    numbers, line, pos = [], 1, 0
    for offset in offsets:
        line += data.count(b"\n", pos, offset)
        numbers.append(line)
        pos = offset
    return numbers
