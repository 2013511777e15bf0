"""The model's tool calls read from their raw arguments: the one tool's check (``ipython`` with ``{"code": str}``),
what the session log keeps of them, and what goes back to the provider in later requests."""

from __future__ import annotations

import json
import re
from typing import Any

from prime_ci.model.protocol import ToolCall


def parse_call(call: ToolCall) -> tuple[str | None, str]:
    """(the cell's code, "") for a well-formed ``ipython`` call, else (None, what the model is told)."""
    if call.name != "ipython":
        return None, f"unknown tool {call.name!r}; the only tool is `ipython` with arguments {{\"code\": str}}"
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError as exc:
        return None, f"arguments are not valid JSON ({exc}); expected {{\"code\": str}}"
    except RecursionError:
        return None, 'arguments are nested too deeply to read; expected {"code": str}'

    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        return None, 'arguments must be an object {"code": str}'
    unknown = sorted(set(args) - {"code"})
    if unknown:
        return None, f"unknown argument(s) {unknown}; expected {{\"code\": str}}"
    return args["code"], ""


_CODE_OPEN = re.compile(r'\s*\{\s*"code"\s*:\s*"')
_LENIENT = json.JSONDecoder(strict=False)  # a raw newline inside the string is still read


def wire_arguments(raw: str) -> str:
    """A tool call's arguments as they go back to the provider in later requests: the model's own text when it
    is a JSON object, else ``{"code": ...}`` with as much of the code as could be read (``{}`` when none).

    Servers parse the arguments of earlier calls: llama.cpp answers 500 to arguments that are not JSON (empty
    ones too), vLLM's chat templates and litellm's Anthropic transformation want an object. A cut-off or
    malformed call would fail every request after it; the session log keeps the raw text (``__raw__``)."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        return raw
    code = parsed if isinstance(parsed, str) else _partial_code(raw)
    return json.dumps({"code": code}) if code is not None else "{}"


def _partial_code(raw: str) -> str | None:
    """The ``code`` string of arguments cut off (or broken) after ``{"code": "``: what arrived of it."""
    opened = _CODE_OPEN.match(raw)
    if opened is None:
        return None
    rest = '"' + raw[opened.end():]
    try:  # the string itself is whole: what broke comes after it
        code: str = _LENIENT.raw_decode(rest)[0]
        return code
    except ValueError:
        pass
    for cut in range(len(rest), max(0, len(rest) - 6), -1):  # drop an escape sequence cut in half (\, \u12)
        try:
            code = _LENIENT.decode(rest[:cut] + '"')
            return code
        except ValueError:
            continue
    return None


def args_for_log(call: ToolCall) -> Any:
    """The arguments as the session log records them: parsed, else the raw text under ``__raw__``."""
    try:
        args = json.loads(call.arguments or "{}")
        json.dumps(args)  # what the session log will do with them
        return args
    except (ValueError, RecursionError):
        return {"__raw__": call.arguments}
