"""The entry file format of the harness and of SKILL.md: ``---`` frontmatter, then a markdown body.

Frontmatter is a flat list of single-line ``key: value`` pairs, a small subset of YAML that is read and
written here without a YAML library. Rendering is deterministic: the same (keys, values, body) always
give the same bytes; values are written plain when YAML would read them back as the same string, and as
JSON-style double-quoted strings otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?:[ \t]+(.*))?")
_CLOSE = re.compile(r"^---[ \t]*$", re.M)
_PLAIN = re.compile(r"[A-Za-z_/.][A-Za-z0-9 _./,()+=@-]*")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "none", "~", "y", "n"})


def _scalar(value: str) -> str:
    if value and _PLAIN.fullmatch(value) and not value.endswith(" ") and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value, ensure_ascii=False)


def render_frontmatter(meta: Sequence[tuple[str, str]], body: str) -> str:
    lines = "".join(f"{key}: {_scalar(value)}\n" for key, value in meta)
    return f"---\n{lines}---\n\n{body.strip(chr(10))}\n"


def parse_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """Split ``---`` frontmatter of single-line ``key: value`` pairs from the body; ValueError when malformed."""
    text = text.replace("\r\n", "\n")
    if not text.startswith("---\n"):
        raise ValueError("missing frontmatter (the file must start with a '---' line)")
    close = _CLOSE.search(text, 4)
    if close is None:
        raise ValueError("frontmatter is not closed by a '---' line")
    meta: dict[str, str] = {}
    for n, line in enumerate(text[4 : close.start()].splitlines(), start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _KEY_LINE.fullmatch(line.rstrip())
        if match is None:
            raise ValueError(f"line {n}: expected 'key: value' (nested YAML is not supported): {line[:80]!r}")
        key, raw = match.group(1), (match.group(2) or "").strip()
        if key in meta:
            raise ValueError(f"line {n}: duplicate key {key!r}")
        meta[key] = _unquote(raw, n)
    body = text[close.end() :].strip("\n")
    return meta, body + "\n" if body else ""


def _unquote(raw: str, n: int) -> str:
    if raw.startswith('"'):
        try:
            value = json.loads(raw)
        except ValueError:
            raise ValueError(f"line {n}: bad double-quoted value {raw[:80]!r}") from None
        if not isinstance(value, str):
            raise ValueError(f"line {n}: bad double-quoted value {raw[:80]!r}")
        return value
    if raw.startswith("'"):
        if len(raw) < 2 or not raw.endswith("'"):
            raise ValueError(f"line {n}: unterminated single-quoted value {raw[:80]!r}")
        return raw[1:-1].replace("''", "'")
    return raw


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
