"""Secret redaction: registered values and their common encodings are masked in everything persisted.

Secrets are registered from the host's environment at start-up (provider keys, tokens, passwords) and by
name with ``register``. Each value is masked raw and as base64 (all three alignments), hex, URL- and
JSON-escaped, and reversed, so a model that was talked into "encoding" a key does not get it into a log.
Each form is also masked with Unicode format characters (zero-width, bidi, soft hyphen: category Cf) between
its characters, which display as nothing: text with none of them takes the plain substring path. The raw value is
also masked split: its letters and digits in order with up to ``SPLIT_GAP`` other characters between each two
(spaces, newlines, quotes and ``+`` of a string literal cut in pieces, dashes); the costly pattern runs only on
text whose letters and digits alone hold the value's.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from urllib.parse import quote, quote_plus

from prime_ci.isolation.untrusted import FORMAT_CHARS

# the userinfo of a URL (``http://user:pass@proxy``): proxy and index settings carry credentials this way
URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/\s@]+)@")
SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|AUTH)", re.IGNORECASE)
MIN_LENGTH = 8
MASK = "[REDACTED]"
SPLIT_GAP = 3
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")

_lock = threading.Lock()
_needles: list[str] = []
_byte_needles: list[bytes] = []
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None  # every needle, format characters allowed between its characters
_spines: list[str] = []  # each value's letters and digits alone (at least MIN_LENGTH of them)
_split: re.Pattern[str] | None = None  # each spine, up to SPLIT_GAP other characters between its characters


def _format_chars() -> list[str]:
    """The characters of the ``FORMAT_CHARS`` class (single characters and ``a-b`` ranges)."""
    chars, i = [], 0
    while i < len(FORMAT_CHARS):
        if i + 2 < len(FORMAT_CHARS) and FORMAT_CHARS[i + 1] == "-":
            chars += [chr(c) for c in range(ord(FORMAT_CHARS[i]), ord(FORMAT_CHARS[i + 2]) + 1)]
            i += 3
        else:
            chars.append(FORMAT_CHARS[i])
            i += 1
    return chars


_FORMAT = re.compile(f"[{FORMAT_CHARS}]")
_FORMAT_ENCODED = frozenset(c.encode() for c in _format_chars())
# the first bytes of a format character that the end of a chunk cut
_FORMAT_CUT = frozenset(e[:n] for e in _FORMAT_ENCODED for n in range(1, len(e)))
CARRY_LIMIT = 64 * 1024  # a stream holds back at most this much of a secret spread with format characters


def variants(value: str) -> set[str]:
    raw = value.encode()
    out = {value, value[::-1], raw.hex(), raw.hex().upper(), quote(value, safe=""), quote_plus(value),
           json.dumps(value)[1:-1]}
    for shift in range(3):
        # base64 of the value at each alignment inside a longer string: drop the edge characters that
        # depend on the neighbours
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        lead = (shift * 4 + 2) // 3
        core = encoded[lead : len(encoded) - 4]
        if len(core) >= MIN_LENGTH:
            out.add(core)
    return {v for v in out if len(v) >= MIN_LENGTH}


def register(value: str) -> None:
    if len(value) < MIN_LENGTH:
        return
    with _lock:
        if value in _values:
            return
        _values.add(value)
        _needles.extend(variants(value))
        _needles.sort(key=len, reverse=True)
        _byte_needles[:] = [n.encode() for n in _needles]
        global _pattern, _split
        gap = f"[{FORMAT_CHARS}]*"
        _pattern = re.compile("|".join(gap.join(map(re.escape, n)) for n in _needles))
        if len(spine := _NOT_ALNUM.sub("", value)) >= MIN_LENGTH:
            _spines.append(spine)
            _spines.sort(key=len, reverse=True)
            between = f"[^A-Za-z0-9]{{0,{SPLIT_GAP}}}"
            _split = re.compile("|".join(between.join(spine) for spine in _spines))


def register_url_credentials(value: str) -> int:
    """Register the credentials in every URL of ``value``: ``user:password`` whole, and the password (or a lone
    token) on its own; returns how many URLs had some."""
    found = 0
    for userinfo in URL_USERINFO.findall(value):
        found += 1
        register(userinfo)
        register(userinfo.partition(":")[2] or userinfo)
    return found


def register_environment(environ: dict[str, str] | None = None) -> int:
    """Register every environment value whose name looks secret, and the credentials in every URL an
    environment value holds (proxies, package indexes); returns how many values."""
    env = os.environ if environ is None else environ
    count = 0
    for name, value in env.items():
        if SECRET_NAME.search(name) and len(value) >= MIN_LENGTH:
            register(value)
            count += 1
        elif register_url_credentials(value):
            count += 1
    return count


def redact(text: str) -> str:
    for needle in _needles:
        if needle in text:
            text = text.replace(needle, MASK)
    text = text if text.isascii() or not _FORMAT.search(text) else _redact_spread(text)
    return _redact_split(text)


def _redact_split(text: str) -> str:
    """``text`` with each value written split (``SPLIT_GAP``) masked."""
    if _split is None:
        return text
    spines = _NOT_ALNUM.sub("", text)
    if not any(spine in spines for spine in _spines):
        return text
    return _split.sub(MASK, text)


def _redact_spread(text: str) -> str:
    """``text`` with the needles written with format characters between their characters masked. The costly
    pattern runs only when the text without format characters holds a needle."""
    folded = _FORMAT.sub("", text)
    if _pattern is None or not any(needle in folded for needle in _needles):
        return text
    return _pattern.sub(MASK, text)


def contains_secret(text: str) -> bool:
    folded = text if text.isascii() else _FORMAT.sub("", text)
    if any(needle in text or needle in folded for needle in _needles):
        return True
    return _split is not None and _split.search(folded) is not None and any(
        spine in _NOT_ALNUM.sub("", folded) for spine in _spines)


def active() -> bool:
    return bool(_needles)


class StreamRedactor:
    """Masks a byte stream that arrives in chunks, so that no secret survives across a chunk boundary.

    Only the end of the stream that could still become a secret is held back (the longest suffix that begins
    some needle, format characters inside it not counted): output that cannot contain one is passed on at once,
    so a log grows as its writer writes.
    """

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        needles = _byte_needles
        text = self._carry + data
        if not needles:
            self._carry = b""
            return text
        for needle in needles:
            if needle in text:
                text = text.replace(needle, _MASK_BYTES)
        spread = False
        if not text.isascii():  # perhaps a format character: UTF-8 text's view of the bytes
            decoded = text.decode("utf-8", "surrogateescape")
            spread = _FORMAT.search(decoded) is not None
            if spread and (masked := _redact_spread(decoded)) is not decoded:
                text = masked.encode("utf-8", "surrogateescape")
        held = _held_spread(text, needles) if spread or text.endswith(tuple(_FORMAT_CUT)) else 0
        for needle in needles:
            start = max(len(text) - len(needle) + 1, 0)
            while (at := text.find(needle[:1], start)) >= 0:
                if len(text) - at > held and needle.startswith(text[at:]):
                    held = len(text) - at
                    break
                start = at + 1
        self._carry = text[len(text) - held:] if held else b""
        return text[: len(text) - held]

    def end(self) -> bytes:
        """What is held back: the stream ended, so it is not a secret."""
        text, self._carry = self._carry, b""
        return text


def _held_spread(text: bytes, needles: list[bytes]) -> int:
    """The longest suffix of ``text`` that begins some needle once the format characters in it (and one cut at
    the very end) are left out; at most ``CARRY_LIMIT`` bytes."""
    longest = max(map(len, needles))
    pos, folded, held = len(text), b"", 0
    for cut in range(3, 0, -1):
        if text[-cut:] in _FORMAT_CUT:
            pos -= cut
            break
    while pos > 0 and len(folded) < longest and len(text) - pos <= CARRY_LIMIT:
        size = next((n for n in (2, 3, 4) if text[pos - n:pos] in _FORMAT_ENCODED), 0)
        if size:
            pos -= size
            continue
        pos -= 1
        folded = text[pos:pos + 1] + folded
        if any(n.startswith(folded) for n in needles):
            held = len(text) - pos
    return held


_MASK_BYTES = MASK.encode()
