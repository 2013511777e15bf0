"""GitHub Actions workflow commands in prime-ci's output: its own, built whole, and every other text made inert.

The runner reads a command in any line of a step's output: ``::name props::data`` at the start of a line (after
leading blanks) and the older ``##[name props]data`` anywhere in one. prime-ci's lines quote file names, settings
keys, commands and output from the repository, setup, builds and gates, and text from the model; in an Actions log
each such text is either inside a block the runner reads no command in (``::stop-commands::TOKEN`` … ``::TOKEN::``,
:func:`stop_commands`, a fresh random token each time) or passed through :func:`neutral`, which breaks ``::`` and
``##[`` wherever they are, so no line break of any kind (LF, CR, ``%0A`` read back, U+2028, U+0085, …) can put one
at the start of a line. prime-ci's own commands are built by :func:`command`, their values neutralised and escaped.
"""

from __future__ import annotations

import re
import secrets

from prime_ci.isolation.untrusted import FORMAT_CHARS

# What a culture-aware comparison may skip between two characters (format characters, controls but LF and CR,
# invisible fillers and variation selectors): ``:`` ZWSP ``:`` counts as ``::`` to such a reader, so it is broken too.
_SKIPPABLE = (f"[{FORMAT_CHARS}\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0\ufe00-\ufe0f"
              "\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f]*")
# The break goes right before the character that completes the pair: a stream can break a pair whose first half
# it already wrote.
_COLONS = re.compile(f"(:{_SKIPPABLE})(?=:)")
_V1_PREFIX = re.compile(f"(#{_SKIPPABLE}#{_SKIPPABLE})(?=\\[)")


def neutral(text: str) -> str:
    """``text`` with every ``::`` and ``##[`` broken by a space (``: :``, ``## [``) wherever it is: no piece of it,
    however its lines are split, starts or holds a workflow command. Idempotent; other text is unchanged."""
    if ":" in text:
        text = _COLONS.sub(r"\1 ", text)
    return _no_v1_prefix(text)


def _no_v1_prefix(text: str) -> str:
    return _V1_PREFIX.sub(r"\1 ", text) if "#" in text else text


def escape_data(text: str) -> str:
    """A workflow command's message, as GitHub reads it back."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, data: str = "", **properties: object) -> str:
    """One workflow command of prime-ci's own, one line: ``::name k=v,…::data``. The data is neutralised, then
    escaped; a property value has its ``:`` escaped and ``##[`` broken. Properties whose value is None are left
    out."""
    props = ",".join(f"{key}={escape_property(_no_v1_prefix(str(value)))}"
                     for key, value in properties.items() if value is not None)
    return f"::{name}{' ' + props if props else ''}::{escape_data(neutral(data))}"


def stop_commands() -> tuple[str, str]:
    """The lines that open and close a block the runner reads no command in. The token is fresh and random, so no
    text inside the block can close it early."""
    token = secrets.token_hex(16)
    return f"::stop-commands::{token}", f"::{token}::"


_JSON_COLONS = re.compile(f"(:{_SKIPPABLE}):")
_JSON_V1 = re.compile(f"(#{_SKIPPABLE}#{_SKIPPABLE})\\[")


def inert_json(text: str) -> str:
    """JSON text (as ``json.dumps`` writes it) with ``::`` and ``##[`` written ``:\\u003a`` and ``##\\u005b``: the same
    document to a parser, no command to the runner. Outside strings JSON never has either, and a ``\\`` before them
    is always a whole escape, so only string contents change form."""
    if ":" in text:
        text = _JSON_COLONS.sub(r"\1\\u003a", text)
    if "#" in text:
        text = _JSON_V1.sub(r"\1\\u005b", text)
    return text
