"""Secret redaction: registered values and their common encodings are masked in everything persisted.

Secrets are registered from the host's environment at start-up (provider keys, tokens, passwords) and by
name with ``register``. Each value is masked raw and as base64 (all three alignments), hex, URL- and
JSON-escaped, and reversed, so a model that was talked into "encoding" a key does not get it into a log.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from urllib.parse import quote, quote_plus

# the userinfo of a URL (``http://user:pass@proxy``): proxy and index settings carry credentials this way
URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/\s@]+)@")
SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|AUTH)", re.IGNORECASE)
MIN_LENGTH = 8
MASK = "[REDACTED]"

_lock = threading.Lock()
_needles: list[str] = []
_byte_needles: list[bytes] = []
_values: set[str] = set()


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
    return text


def contains_secret(text: str) -> bool:
    return any(needle in text for needle in _needles)


def active() -> bool:
    return bool(_needles)


class StreamRedactor:
    """Masks a byte stream that arrives in chunks, so that no secret survives across a chunk boundary.

    Only the end of the stream that could still become a secret is held back (the longest suffix that begins
    some needle): output that cannot contain one is passed on at once, so a log grows as its writer writes.
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
        held = 0
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


_MASK_BYTES = MASK.encode()
