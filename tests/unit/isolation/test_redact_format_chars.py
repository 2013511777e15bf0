"""Issue 24 item 8: a secret written with Unicode format characters (category Cf: zero-width, bidi, soft hyphen,
tag characters) between its letters is masked like the secret itself: in text, in a stream split anywhere
(also inside a format character's bytes), and in a run's artifacts (patch.diff, the gate log)."""

from __future__ import annotations

import base64
import re
import unicodedata
import uuid
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.isolation import redact
from prime_ci.isolation.redact import MASK, StreamRedactor
from prime_ci.testing import ScriptedServer, ipython, reply

FORMAT = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
SAMPLES = ["\u200b", "\u00ad", "\u202e", "\u2066", "\ufeff", "\u2060", "\U000e0041"]
FOLD = re.compile("[" + "".join(FORMAT) + "]")


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


SPREAD_GATE = """import os, sys, time
log, token = sys.argv[1], os.environ["HARDEN_TEST_TOKEN"]
spread = "\\u200b".join(token).encode()


def logged(text):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(log) and text in open(log, "rb").read():
            return
        time.sleep(0.02)
    sys.exit(f"never logged: {text}")


cut = len(spread) // 2 + 1  # inside a zero-width space's three bytes
sys.stdout.buffer.write(b"BEFORE " + spread[:cut]); sys.stdout.flush()
logged(b"BEFORE")  # the host has read the first part: the rest comes in another read
sys.stdout.buffer.write(spread[cut:] + b"\\nAFTER\\n"); sys.stdout.flush()
logged(b"AFTER")
as_written = open(log, encoding="utf-8", errors="replace").read().replace("\\u200b", "")
print("STREAM", "LEAK" if token in as_written else "CLEAN")
"""
WRITE_SPREAD = ("import os\nopen('leak.txt', 'w').write('\\u2063'.join(os.environ['HARDEN_TEST_TOKEN']) + '\\n')\n"
                "print('written')")


def test_a_spread_secret_never_reaches_the_patch_or_the_gate_log(tmp_path: Path) -> None:
    """Found in the patch it stops the run (exit 7), as the plain secret does; masked in every artifact."""
    secret = f"tok-{uuid.uuid4().hex}"
    repo = make_repo(tmp_path / "repo", {**BUGGY, "spread.py": SPREAD_GATE})
    out = tmp_path / "out-0"
    with ScriptedServer([ipython(WRITE_SPREAD), reply("done")]) as server:
        run = run_inproc(tmp_path, repo, server, "--gate", f"python spread.py {out}/gates/spread.py.log",
                        "--pass-env", "HARDEN_TEST_TOKEN", "--sandbox", "off", env={"HARDEN_TEST_TOKEN": secret})
    assert run.out == out and run.code == 7, run.proc.stderr
    assert run.result["stop_reason"] == "security_stop" and "secret" in run.result["detail"], "as for the plain secret"
    assert "+[REDACTED]" in (out / "patch.diff").read_text()
    (log,) = (out / "gates").glob("*.log")
    assert log.read_text() == "BEFORE [REDACTED]\nAFTER\nSTREAM CLEAN\n", "masked as written, not only at the end"
    for path in [p for p in out.rglob("*") if p.is_file()]:
        assert secret not in FOLD.sub("", path.read_bytes().decode(errors="replace")), path
