"""The steps of a scripted provider conversation (see ``prime_ci.testing.ScriptedServer``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

Body = dict[str, Any]
Predicate = Callable[[Body], bool]
Headers = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # sent verbatim, so it may be malformed JSON on purpose
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    kind: ClassVar[str] = "reply"
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Mapping[str, int] | None = None
    delay: float = 0.0
    finish_reason: str | None = None


@dataclass(frozen=True)
class Error:
    kind: ClassVar[str] = "error"
    status: int
    message: str = "scripted error"
    retry_after: float | None = None
    times: int = 1


@dataclass(frozen=True)
class Hang:
    kind: ClassVar[str] = "hang"
    seconds: float


@dataclass(frozen=True)
class Drip:
    kind: ClassVar[str] = "drip"
    text: str
    interval: float


@dataclass(frozen=True)
class Truncated:
    kind: ClassVar[str] = "truncated"
    text: str = "this response is cut off before it"


@dataclass(frozen=True)
class Raw:
    kind: ClassVar[str] = "raw"
    status: int
    body: bytes
    headers: Mapping[str, str] | None = None


Step = Reply | Error | Hang | Drip | Truncated | Raw
Script = Sequence[Step] | Callable[[Body], Step | None]


def tool_call(name: str, arguments: Mapping[str, Any] | str, id: str | None = None) -> ToolCall:
    return ToolCall(name, arguments if isinstance(arguments, str) else json.dumps(dict(arguments)), id)


def reply(
    text: str | None = None, tool_calls: Sequence[ToolCall] | None = None, *,
    usage: Mapping[str, int] | None = None, delay: float = 0.0, finish_reason: str | None = None,
) -> Reply:
    return Reply(text, tuple(tool_calls or ()), usage, delay, finish_reason)


def ipython(code: str, *, text: str | None = None, delay: float = 0.0) -> Reply:
    return reply(text, [tool_call("ipython", {"code": code})], delay=delay)


def error(
    status: int, message: str = "scripted error", *, retry_after: float | None = None, times: int = 1
) -> Error:
    if times < 1:
        raise ValueError("times must be >= 1")
    return Error(status, message, retry_after, times)


# hang(seconds), drip(text, interval), truncated(text=...), raw(status, body, headers=None)
hang, drip, truncated, raw = Hang, Drip, Truncated, Raw


def contains(text: str) -> Predicate:
    """Predicate: `text` occurs in the content of any message (string or list of content parts)."""

    def predicate(body: Body) -> bool:
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            parts = content if isinstance(content, list) else [{"text": content}]
            for part in parts:
                part_text = part.get("text") if isinstance(part, dict) else None
                if isinstance(part_text, str) and text in part_text:
                    return True
        return False

    return predicate


_BUILDERS: dict[str, Callable[..., Step]] = {
    "reply": reply, "ipython": ipython, "error": error, "hang": hang, "drip": drip, "truncated": truncated,
    "raw": raw,
}


def steps_from_json(items: Sequence[Mapping[str, Any]]) -> list[Step]:
    """Build steps from objects like {"kind": "reply", "text": ..., "tool_calls": [{"name", "arguments"}]}.

    `kind` defaults to "reply"; other keys are the keyword arguments of the step helper of that name.
    A raw step's `body` may be a string (sent as UTF-8) or any JSON value (sent serialized).
    """
    steps: list[Step] = []
    for item in items:
        spec = dict(item)
        kind = spec.pop("kind", "reply")
        if kind not in _BUILDERS:
            raise ValueError(f"unknown step kind {kind!r} in {dict(item)!r}")
        if kind == "reply" and spec.get("tool_calls"):
            spec["tool_calls"] = [tool_call(**tc) for tc in spec["tool_calls"]]
        if kind == "raw":
            body = spec.get("body", "")
            spec["body"] = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        try:
            steps.append(_BUILDERS[kind](**spec))
        except TypeError as e:
            raise ValueError(f"bad {kind} step {dict(item)!r}: {e}") from e
    return steps
