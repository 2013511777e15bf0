"""The Anthropic Messages side of the scripted provider: prompt blocks, responses, SSE events, errors."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from prime_ci.testing.cache import Block, CacheUsage, canonical, without_cache_control
from prime_ci.testing.openai_api import ERROR_TYPES, MODELS, cap_output, merge_usage, output_tokens, pieces
from prime_ci.testing.steps import Body, Reply

MAX_BREAKPOINTS = 4
_ERROR_TYPES = {**ERROR_TYPES, 413: "request_too_large", 529: "overloaded_error"}
_STOP_REASONS = {"length": "max_tokens", "stop": "end_turn", "tool_calls": "tool_use", "content_filter": "refusal"}
_USAGE_ALIASES = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens"}


class Inexpressible(ValueError):
    """A scripted reply the Messages API has no form for (tool arguments that are not a JSON object)."""


def error_body(status: int, message: str) -> bytes:
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def _blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else [content]


def _marked(block: Any) -> bool:
    """A breakpoint: ``cache_control`` on the block, or on a part of its content (where litellm puts a
    tool message's: inside the tool_result). A nested breakpoint's prefix runs to the end of its block."""
    if not isinstance(block, dict):
        return False
    inner = block.get("content")
    return isinstance(block.get("cache_control"), dict) or (isinstance(inner, list) and any(map(_marked, inner)))


def prompt_blocks(body: Body) -> list[Block]:
    """The prompt as Anthropic caches it: tools, then system blocks, then each message's content blocks.

    A block's key holds its place (tool / system / message index and role) and its content without
    ``cache_control`` (string content read as one text block); its size is its content's canonical JSON.
    """
    blocks: list[Block] = []

    def add(place: Body, block: Any) -> None:
        mark = _marked(block)
        if isinstance(block, dict) and isinstance(block.get("content"), str):  # shorthand for one text block
            block = {**block, "content": _blocks(block["content"])}
        content = canonical(without_cache_control(block))
        blocks.append(Block(canonical(place) + content, len(content), mark))

    for tool in body.get("tools") or []:
        add({"part": "tool"}, tool)
    for block in _blocks(body.get("system")):
        add({"part": "system"}, block)
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            add({"message": i}, message)
            continue
        for block in _blocks(message.get("content")):
            add({"message": i, "role": message.get("role")}, block)
    return blocks


def request_problem(body: Body, blocks: Sequence[Block], prompt_tokens: int, window: int | None) -> str | None:
    """The invalid_request_error message the Messages API would answer, if any."""
    marks = sum(b.breakpoint for b in blocks)
    if marks > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marks}."
    if window is None:
        return None
    if prompt_tokens > window:
        return f"prompt is too long: {prompt_tokens} tokens > {window} maximum"
    limit = body.get("max_tokens")
    if isinstance(limit, int) and prompt_tokens + limit > window:
        return (f"input length and `max_tokens` exceed context limit: {prompt_tokens} + {limit} > {window}, "
                "decrease input length or `max_tokens` and try again")
    return None


def signature(thinking: str) -> str:
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def message(step: Reply, body: Body, n: int, cache: CacheUsage, *, stream: bool) -> Body:
    """The Messages response for `step`. Unless streaming (which sends arguments verbatim as partial JSON),
    tool arguments that are not a JSON object raise ``Inexpressible``."""
    content: list[Body] = []
    if step.reasoning is not None:
        content.append({"type": "thinking", "thinking": step.reasoning, "signature": signature(step.reasoning)})
    if step.text:
        content.append({"type": "text", "text": step.text})
    for i, call in enumerate(step.tool_calls):
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            if not stream:
                raise Inexpressible(f"scripted tool call {call.name!r} has arguments that are not a JSON object "
                                    f"({call.arguments!r}): a Messages response can only carry them when streaming")
            arguments = {}
        content.append({"type": "tool_use", "id": call.id or f"toolu_scripted_{n}_{i}", "name": call.name,
                        "input": arguments})
    usage: dict[str, Any] = {"input_tokens": cache.uncached, "cache_creation_input_tokens": cache.write,
                             "cache_read_input_tokens": cache.read, "output_tokens": output_tokens(step)[0]}
    merge_usage(usage, step.usage, anthropic=True, aliases=_USAGE_ALIASES)
    scripted_stop = _STOP_REASONS.get(step.finish_reason, step.finish_reason) if step.finish_reason else None
    stop = scripted_stop or ("tool_use" if step.tool_calls else "end_turn")
    limit = body.get("max_tokens")
    if cap_output(usage, "output_tokens", limit if isinstance(limit, int) else None):
        stop = scripted_stop or "max_tokens"
    return {"id": f"msg_scripted_{n}", "type": "message", "role": "assistant", "model": body.get("model", MODELS[0]),
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}


def stream_events(msg: Body, arguments: Sequence[str]) -> list[bytes]:
    """SSE events for `msg`; `arguments` are the scripted tool arguments, sent verbatim as input_json_delta."""

    def event(data: Body) -> bytes:
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

    usage = msg["usage"]
    head = {**msg, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [event({"type": "message_start", "message": head})]
    tool_arguments = iter(arguments)
    for index, block in enumerate(msg["content"]):
        kind = block["type"]
        if kind == "thinking":
            start: Body = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"], 3)]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"], 3)]
        else:
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(next(tool_arguments), 2)]
        events.append(event({"type": "content_block_start", "index": index, "content_block": start}))
        events += [event({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(event({"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": msg["stop_reason"], "stop_sequence": None}
    events.append(event({"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}))
    events.append(event({"type": "message_stop"}))
    return events
