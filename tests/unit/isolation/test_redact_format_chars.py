"""Issue 24 item 8: a secret written with Unicode format characters (category Cf: zero-width, bidi, soft hyphen, tag
characters) between its letters is masked like the secret itself: in text, in a stream split anywhere (also inside
a format character's bytes), and in a run's artifacts (patch.diff, the gate log:
tests/runs/isolation/test_redact_spread_secret_run.py)."""

from __future__ import annotations

import base64
import uuid

import pytest

from prime_ci.isolation import redact
from prime_ci.isolation.redact import MASK, StreamRedactor
from unit.isolation.format_chars import FOLD, FORMAT

SAMPLES = ["\u200b", "\u00ad", "\u202e", "\u2066", "\ufeff", "\u2060", "\U000e0041"]


@pytest.fixture(scope="module")
def secret() -> str:
    value = f"tok-{uuid.uuid4().hex}"
    redact.register(value)
    return value


def test_every_format_character_between_the_letters_is_masked(secret: str) -> None:
    for char in FORMAT:
        spread = char.join(secret)
        assert redact.redact(f"a {spread} b") == f"a {MASK} b", repr(char)
        assert redact.contains_secret(spread)
    mixed = "".join(c + SAMPLES[i % len(SAMPLES)] * (i % 3) for i, c in enumerate(secret[:-1])) + secret[-1]
    assert redact.redact(mixed) == MASK
    encoded = base64.b64encode(secret.encode()).decode()
    masked = FOLD.sub("", redact.redact("\u200b".join(encoded)))
    assert MASK in masked and encoded[4:-4] not in masked, "the encodings too"
    assert redact.redact("\u200d".join(secret[::-1])) == MASK


def test_text_without_the_secret_is_left_alone(secret: str) -> None:
    text = "emoji 👩\u200d💻, soft\u00adhyphen, " + "\u200b".join(secret[:-1]) + " (one letter short)"
    assert redact.redact(text) == text and not redact.contains_secret(text)


@pytest.mark.parametrize("char", SAMPLES)
def test_a_stream_split_anywhere_is_masked(secret: str, char: str) -> None:
    data = f"before {char.join(secret)} after {char}\n".encode() + b"\xff raw"
    want = f"before {MASK} after {char}\n".encode() + b"\xff raw"
    for cut in range(len(data) + 1):
        stream = StreamRedactor()
        assert stream.feed(data[:cut]) + stream.feed(data[cut:]) + stream.end() == want, cut
    stream = StreamRedactor()
    assert b"".join(stream.feed(data[i:i + 1]) for i in range(len(data))) + stream.end() == want


def test_a_stream_passes_text_on_without_holding_it(secret: str) -> None:
    stream = StreamRedactor()
    assert stream.feed("plain \u200b text\n".encode()) == "plain \u200b text\n".encode()
    assert stream.feed(f"x {secret[:3]}\u200b".encode()) == b"x ", "a spread beginning of the secret is held"
    assert stream.feed(b"!") + stream.end() == f"{secret[:3]}\u200b!".encode()
