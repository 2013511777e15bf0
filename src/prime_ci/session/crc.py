"""One session record's JSON text, and its checksum: crc32 over a canonical form that survives re-serialisation.

A record's ``crc32`` member covers the record's *value*, not its bytes, so another writer that parses the
line and prints it again (Prime Agent's ``JSON.stringify`` when it rewrites a session) keeps it valid. The
canonical form of a record is the JSON text of its value with the top-level ``crc32`` member removed and:

- object members sorted by key, no whitespace (``,`` and ``:`` separators);
- every string escaped to ASCII (``\\uXXXX``, astral characters as surrogate pairs), so a string has one
  spelling whether the writer escaped non-ASCII characters or not;
- every number taken as an IEEE-754 double, as a JavaScript reader holds it: an integral value is written as
  plain integer digits (``0.0``, ``-0``, ``1e2``, ``100.0`` and ``100`` all become ``0`` or ``100``), any other
  finite value as its shortest round-trip decimal (``4.5e-05`` and ``0.000045`` agree), a value that is not
  finite (``NaN``, ``Infinity``, ``1e400``) as ``null``, which is what ``JSON.stringify`` prints for it.

The checksum is ``zlib.crc32`` of those ASCII bytes, stored as 8 lowercase hex digits in ``crc32``, which may
sit anywhere in the object. Integers beyond 2**53 count only as the double nearest them: the checksum does not
see an edit below that precision (a JavaScript reader could not hold the difference either).

prime-ci writes records as compact JSON a JavaScript reader parses: NaN and the infinities, which JSON cannot
spell, are written as null, as ``JSON.stringify`` would.
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

_EXACT_INT = 2**53


def _from_int(literal: str) -> int | float | None:
    value = int(literal)
    if -_EXACT_INT <= value <= _EXACT_INT:
        return value
    try:
        return _from_double(float(value))
    except OverflowError:
        return None


def _from_float(literal: str) -> int | float | None:
    return _from_double(float(literal))


def _from_double(value: float) -> int | float | None:
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() else value


def _constant(_: str) -> None:
    return None


def canonical(text: str | bytes) -> bytes:
    """The canonical form of one JSON record (see the module docstring); ``ValueError`` if it is not JSON."""
    value: Any = json.loads(text, parse_int=_from_int, parse_float=_from_float, parse_constant=_constant)
    if isinstance(value, dict):
        value.pop("crc32", None)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def record_crc(text: str | bytes) -> str:
    """The ``crc32`` member a record's text must carry: 8 lowercase hex digits over its canonical form."""
    return f"{zlib.crc32(canonical(text)):08x}"


def signed_line(text: str) -> bytes:
    """One record's line: its text with the ``crc32`` member appended (its last character is the closing brace)."""
    body = text.encode("utf-8", "backslashreplace")
    return body[:-1] + b',"crc32":"%s"}\n' % record_crc(body).encode()


def record_text(entry: dict[str, Any]) -> str:
    """A record as prime-ci writes it: compact, non-ASCII characters as they are, non-finite numbers as null."""
    try:
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(entry), ensure_ascii=False, separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
