"""The steps of a scripted provider conversation (see ``prime_ci.testing.ScriptedServer``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

Body = dict[str, Any]
Predicate = Callable[[Body], bool]
Headers = Sequence[tuple[str, str]]
# Top-level counts, or nested detail dicts such as OpenAI's prompt_tokens_details / completion_tokens_details.
UsageSpec = Mapping[str, int | Mapping[str, int]]
# Usage keys of the Anthropic Messages API: the OpenAI path leaves them out of its usage.
ANTHROPIC_USAGE_KEYS = frozenset({"input_tokens", "output_tokens", "cache_read_input_tokens",
                                  "cache_creation_input_tokens", "cache_creation"})


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
    usage: UsageSpec | None = None
    delay: float = 0.0
    finish_reason: str | None = None
    reasoning: str | None = None


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
    usage: UsageSpec | None = None, delay: float = 0.0, finish_reason: str | None = None,
    reasoning: str | None = None,
) -> Reply:
    return Reply(text, tuple(tool_calls or ()), usage, delay, finish_reason, reasoning)


def ipython(code: str, *, text: str | None = None, delay: float = 0.0, reasoning: str | None = None) -> Reply:
    return reply(text, [tool_call("ipython", {"code": code})], delay=delay, reasoning=reasoning)


def error(
    status: int, message: str = "scripted error", *, retry_after: float | None = None, times: int = 1
) -> Error:
    if times < 1:
        raise ValueError("times must be >= 1")
    return Error(status, message, retry_after, times)


# hang(seconds), drip(text, interval), truncated(text=...), raw(status, body, headers=None)
hang, drip, truncated, raw = Hang, Drip, Truncated, Raw


def contains(text: str) -> Predicate:
    """Predicate: `text` occurs in the content of any message (a string or content parts, including the
    content of Anthropic tool_result blocks) or in an Anthropic request's top-level `system`."""

    def found(content: Any) -> bool:
        if isinstance(content, str):
            return text in content
        if isinstance(content, list):
            return any(isinstance(p, dict) and (found(p.get("text")) or found(p.get("content"))) for p in content)
        return False

    def predicate(body: Body) -> bool:
        messages = body.get("messages") or []
        return found(body.get("system")) or any(isinstance(m, dict) and found(m.get("content")) for m in messages)

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
