"""Reading session logs: one linear pass that classifies every line (valid, damaged, torn tail).

Used read-only by ``read_session`` (display, replay, refine) and by ``SessionLog.open_for_append`` to decide
what to repair. Arbitrary bytes yield valid records, a report of what is wrong, or ``LogCorruptError``.
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

from prime_ci.errors import LogCorruptError

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


def _parse(raw: bytes, need_crc: bool) -> dict[str, Any]:
    """One record, fully checked, or ``_Bad`` with the reason."""
    if b"\0" in raw:
        raise _Bad(f"{raw.count(0)} NUL bytes")
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise _Bad(f"invalid JSON: {str(exc)[:100]}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise _Bad("not a session entry")
    if "crc32" in obj:
        # The crc covers the line as serialised without its crc field: everything before the suffix, plus "}".
        match = _CRC_SUFFIX.fullmatch(raw, max(0, len(raw) - 20))
        if match is None or obj["crc32"] != match[1].decode():
            raise _Bad("crc32 field is not the last field")
        if zlib.crc32(raw[: match.start()] + b"}") != int(match[1], 16):
            raise _Bad("crc32 mismatch")
    elif need_crc:
        raise _Bad("crc32 missing")
    seq = obj.get("seq")
    if seq is not None and (type(seq) is not int or seq < 0):
        raise _Bad(f"invalid seq {str(seq)[:20]}")
    return obj


@dataclass
class LogScan:
    header: dict[str, Any] | None = None
    good: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # start, end (after \n), entry
    bad: list[tuple[int, int, str]] = field(default_factory=list)  # start, end, reason
    gaps: list[tuple[int, int, int]] = field(default_factory=list)  # offset of the record after, seq before, seq
    accepted: set[tuple[int, int]] = field(default_factory=set)  # gaps declared by a salvage record
    tail_offset: int = 0
    tail: bytes = b""
    tail_entry: dict[str, Any] | None = None  # the tail is a complete record missing only its newline
    nul_runs: list[tuple[int, int]] = field(default_factory=list)

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


def scan_log(data: bytes) -> LogScan:
    """Classify every line of a log in one linear pass."""
    scan = LogScan(nul_runs=[(m.start(), m.end() - m.start()) for m in _NULS.finditer(data)] if b"\0" in data else [])
    *lines, scan.tail = data.split(b"\n")
    offset, prev, need_crc = 0, -1, False
    nul_starts = [start for start, _ in scan.nul_runs]
    for raw in lines:
        start, offset = offset, offset + len(raw) + 1
        try:
            entry = _parse(raw, need_crc)
            seq = entry.get("seq")
            if seq is not None and prev >= 0 and seq <= prev:
                raise _Bad(f"seq {seq} after {prev}: duplicated or reordered record")
        except _Bad as exc:
            i = bisect.bisect_left(nul_starts, start)
            nul = f" at byte {nul_starts[i]}" if i < len(nul_starts) and nul_starts[i] < offset else ""
            scan.bad.append((start, offset, f"{exc}{nul}"))
            continue
        if not scan.good and entry["type"] == "session":
            scan.header, need_crc = entry, "crc32" in entry
        if seq is not None:
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
            entry = _parse(scan.tail, need_crc)
            seq = entry.get("seq")
            if seq is None or prev < 0 or seq == prev + 1:
                scan.tail_entry = entry
        if not scan.good and scan.tail_entry is not None and scan.tail_entry["type"] == "session":
            scan.header = scan.tail_entry
    return scan


@dataclass
class SessionFile:
    """A parsed session: header, entries, and what was wrong with the file."""

    header: dict[str, Any]
    entries: list[dict[str, Any]]
    torn_tail: bytes = b""  # an unterminated final fragment, ignored
    bad_lines: list[tuple[int, str]] = field(default_factory=list)  # (offset, reason), skipped
    seq_gaps: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, seq before, seq after), undeclared
    nul_runs: list[tuple[int, int]] = field(default_factory=list)  # (offset, length) anywhere in the file
    unterminated: bool = False  # the last entry is complete but lacks its newline

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


def parts_text(parts: Any) -> str:
    """The text of a message's content: a string, or the ``text`` parts of a content-part list."""
    if isinstance(parts, str):
        return parts
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text")


def read_session(path: Path, *, strict: bool = False) -> SessionFile:
    """Parse a session file without modifying it. A torn last line (no newline) is set aside, never fatal.

    Damage in the middle (a malformed, NUL-filled, crc-mismatched, duplicated or reordered line, or missing
    records) is not a process crash: with ``strict`` that raises ``LogCorruptError`` naming the offset;
    otherwise it is reported (``bad_lines``, ``seq_gaps``, ``nul_runs``) and skipped, for display.
    """
    scan = scan_log(path.read_bytes())
    if strict:
        if scan.header is None:
            raise LogCorruptError(str(path), 0, "no session header")
        if (damage := scan.first_damage()) is not None:
            raise LogCorruptError(str(path), *damage)
    entries = [entry for _, _, entry in scan.good]
    if scan.tail_entry is not None:
        entries.append(scan.tail_entry)
    header = scan.header
    if header is None:
        header = {"type": "session", "version": VERSION, "id": "", "timestamp": "", "cwd": ""}
    else:
        entries = entries[1:]
    return SessionFile(header=header, entries=entries, torn_tail=b"" if scan.tail_entry is not None else scan.tail,
                       bad_lines=[(start, reason) for start, _, reason in scan.bad], seq_gaps=scan.open_gaps(),
                       nul_runs=scan.nul_runs, unterminated=scan.tail_entry is not None)  # fmt: skip
