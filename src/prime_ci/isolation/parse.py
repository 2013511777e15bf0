"""TOML and JSON that someone else wrote (the repository, the model, an artifact): a nesting bomb is a decode error.

The standard library's parsers recurse once per level of nesting, so ``a = [[[[…]]]]`` a hundred thousand deep
raises ``RecursionError``, which no caller expects: a repository's ``prime-ci.toml`` or a ``pyproject.toml`` the
model wrote would end the run without artifacts. These wrappers turn it into the parser's own error.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

TOO_DEEP = "nested too deeply"


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``; ``tomllib.TOMLDecodeError`` also when the document is nested too deeply."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError(TOO_DEEP) from None


def json_loads(text: str | bytes) -> Any:
    """``json.loads``; ``json.JSONDecodeError`` also when the document is nested too deeply."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError(TOO_DEEP, doc, 0) from None
