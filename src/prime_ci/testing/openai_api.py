"""The OpenAI chat-completions side of the scripted provider: responses, SSE chunks, request checks."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any

from prime_ci.testing.cache import canonical
from prime_ci.testing.steps import ANTHROPIC_USAGE_KEYS, Body, Reply, UsageSpec

MODELS = ("scripted-model", "gpt-4o-mini")
# the error types both APIs name alike (the Messages API adds its own: anthropic_api)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 429: "rate_limit_error"}
_ERROR_CODES = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}


def error_body(status: int, message: str) -> bytes:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = _ERROR_CODES.get(status)
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def llama_error_body(status: int, message: str) -> bytes:
    """llama.cpp's server error shape (integer code)."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return json.dumps({"error": {"code": status, "message": message, "type": kind}}).encode()


def vllm_error_body(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}).encode()


def models_body(context_window: int | None, *, llama: bool = False) -> bytes:
    """/v1/models: with a window, as vLLM lists it (``max_model_len``), or as llama.cpp does (``llama``): the
    window the server was started with is ``meta.n_ctx``, and ``meta.n_ctx_train``, what the model was trained
    on, is larger (``llama-server -c N`` below it), so a client that reads the wrong one is caught. llama.cpp's
    models are ``owned_by`` ``llamacpp``, with a window or without."""
    models: list[Body] = []
    for name in MODELS:
        model: Body = {"id": name, "object": "model", "created": 0, "owned_by": "llamacpp" if llama else "prime-ci"}
        if context_window is not None and llama:
            model |= {"meta": {"n_ctx_train": 4 * context_window, "n_ctx": context_window}}
        elif context_window is not None:
            model |= {"max_model_len": context_window}
        models.append(model)
    return json.dumps({"object": "list", "data": models}).encode()


def pieces(s: str, k: int) -> list[str]:
    size = max(1, math.ceil(len(s) / k))
    return [s[i : i + size] for i in range(0, len(s), size)]


def prompt_chars(body: Body) -> int:
    return len(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", [])))


def prompt_text(body: Body) -> str:
    """The canonical prompt for prefix caching: tools first (as a chat template renders them), then each
    message. It is never longer than what ``prompt_chars`` counts, so cached tokens never exceed prompt tokens."""
    messages = body.get("messages")
    return canonical(body.get("tools") or []) + "".join(map(canonical, messages if isinstance(messages, list) else []))


def requested_completion(body: Body) -> int:
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return limit if isinstance(limit, int) else 0


def context_problem(body: Body, prompt_tokens: int, window: int) -> str | None:
    """vLLM's message when the prompt plus the requested completion does not fit `window`."""
    completion = requested_completion(body)
    if prompt_tokens + completion <= window:
        return None
    return (f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt_tokens + completion} tokens ({prompt_tokens} in the messages, {completion} in the completion). "
            "Please reduce the length of the messages or completion.")


def strict_problem(body: Body) -> tuple[int, str] | None:
    """What local servers reject: request validation (400) comes before chat-template rendering (500)."""
    messages = body.get("messages")
    indexed = [(i, m) for i, m in enumerate(messages) if isinstance(m, dict)] if isinstance(messages, list) else []
    for i, m in indexed:
        if m.get("role") == "tool" and not isinstance(m.get("tool_call_id"), str):
            return 400, f"messages[{i}]: a 'tool' message needs a 'tool_call_id' string"
        for j, call in enumerate(m.get("tool_calls") or [] if m.get("role") == "assistant" else []):
            fn = call.get("function") if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if not isinstance(args, str):
                return 400, (f"messages[{i}].tool_calls[{j}].function.arguments: Input should be a valid string, "
                             f"got {json.dumps(args)}")
    for i, m in indexed:
        if m.get("role") != "assistant":
            continue
        for j, call in enumerate(m.get("tool_calls") or []):
            if (problem := _arguments_problem(call["function"]["arguments"])) is not None:
                return 500, f"Failed to parse tool call arguments as JSON: messages[{i}].tool_calls[{j}]: {problem}"
        if "content" not in m:
            return 500, (f"Failed to parse messages: Expected 'content' (ref: "
                         f"https://github.com/ggml-org/llama.cpp/issues/8367); messages[{i}] (assistant) has none")
        if m["content"] is None:
            return 500, (f"Failed to apply chat template: messages[{i}] (assistant) has \"content\": null and the "
                         "template concatenates it as a string: can only concatenate str (not \"NoneType\") to str")
    return None


def _arguments_problem(arguments: str) -> str | None:
    """Why llama.cpp cannot read earlier tool-call arguments (it parses them to render the chat template)."""
    try:
        json.loads(arguments)
    except ValueError as exc:
        return f"[json.exception.parse_error] {exc} in {arguments[:80]!r}"
    except RecursionError:
        return "[json.exception.parse_error] nested too deeply"
    return None


def output_tokens(step: Reply) -> tuple[int, int]:
    """(output tokens, of which reasoning) of a scripted reply: ~4 characters a token, at least one."""
    produced = len(step.text or "") + sum(len(c.name) + len(c.arguments) for c in step.tool_calls)
    reasoning = math.ceil(len(step.reasoning) / 4) if step.reasoning else 0
    return max(1, math.ceil(produced / 4) + reasoning), reasoning


def merge_usage(usage: dict[str, Any], scripted: UsageSpec | None, *, anthropic: bool,
                aliases: Mapping[str, str] | None = None) -> None:
    """Scripted usage wins, in the API's own keys (``ANTHROPIC_USAGE_KEYS`` or the others), or under its name in
    this API (``aliases``) unless that is scripted too; a scripted nested dict updates the computed one key by key."""
    scripted = scripted or {}
    for key, value in scripted.items():
        name = key if (key in ANTHROPIC_USAGE_KEYS) == anthropic else (aliases or {}).get(key)
        if name is None or (name != key and name in scripted):
            continue
        computed = usage.get(name)
        if isinstance(value, Mapping):
            value = {**(computed if isinstance(computed, Mapping) else {}), **value}
        usage[name] = value


def cap_output(usage: dict[str, Any], key: str, limit: int | None) -> bool:
    """Cap the output tokens at the request's limit (None: no limit); whether they were over it."""
    if limit is None or usage[key] <= limit:
        return False
    usage[key] = limit
    return True


def completion(step: Reply, body: Body, n: int, *, prompt_tokens: int, cached_tokens: int | None) -> Body:
    calls: list[Body] = []
    for i, c in enumerate(step.tool_calls):
        fn = {"name": c.name, "arguments": c.arguments}
        calls.append({"id": c.id or f"call_{n}_{i}", "type": "function", "function": fn})
    content = step.text if step.text is not None else (None if calls else "")
    completion_tokens, reasoning = output_tokens(step)
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if step.reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    merge_usage(usage, step.usage, anthropic=False)
    finish = step.finish_reason or ("tool_calls" if calls else "stop")
    limit = requested_completion(body)
    capped = cap_output(usage, "completion_tokens", limit if limit > 0 else None)
    if capped:
        finish = step.finish_reason or "length"
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict) and details.get("reasoning_tokens", 0) > limit:
            usage["completion_tokens_details"] = {**details, "reasoning_tokens": limit}
    if capped or "total_tokens" not in (step.usage or {}):
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    message: Body = {"role": "assistant", "content": content}
    if step.reasoning is not None:
        message["reasoning_content"] = step.reasoning  # vLLM / llama.cpp / DeepSeek field name
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    return {"id": f"chatcmpl-scripted-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", MODELS[0]), "choices": [choice], "usage": usage}


def stream_events(completion: Body) -> list[bytes]:
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: Body, finish: str | None = None) -> Body:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    content = message["content"]
    chunks = [chunk({"role": "assistant", "content": None if content is None else ""})]
    chunks += [chunk({"reasoning_content": piece}) for piece in pieces(message.get("reasoning_content") or "", 3)]
    chunks += [chunk({"content": piece}) for piece in pieces(content or "", 3)]
    for i, call in enumerate(message.get("tool_calls", [])):
        fn = call["function"]
        head = {"index": i, "id": call["id"], "type": "function"}
        chunks.append(chunk({"tool_calls": [head | {"function": {"name": fn["name"], "arguments": ""}}]}))
        for piece in pieces(fn["arguments"], 2):
            chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
