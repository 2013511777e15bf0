"""Model calls. The only module that imports litellm, and only in the root host process.

litellm takes seconds to import, so ``start_import()`` begins it on a background thread at start-up while
the worktree and kernel come up. Retries live here and only here (litellm's own are off): bounded attempts,
exponential backoff with jitter, ``Retry-After`` honoured, an absolute deadline per attempt, and no retry
for 4xx other than 408/409/429.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from prime_ci.errors import ConfigError, ModelError
from prime_ci.redact import redact

RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504, 529}

_lock = threading.Lock()
_thread: threading.Thread | None = None
_module: ModuleType | None = None
_import_error: BaseException | None = None


def _do_import() -> None:
    global _module, _import_error
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    try:
        import litellm

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.drop_params = True
        _module = litellm
    except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by litellm_module()
        _import_error = exc


def start_import() -> None:
    """Begin importing litellm in the background (idempotent)."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_do_import, name="litellm-import", daemon=True)
            _thread.start()


def litellm_module() -> ModuleType:
    start_import()
    assert _thread is not None
    _thread.join()
    if _import_error is not None:
        raise _import_error
    assert _module is not None
    return _module


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ModelReply:
    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    cost_usd: float | None
    finish_reason: str
    model: str
    attempts: int = 1
    errors: list[str] = field(default_factory=list)


class Model(Protocol):
    name: str

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply: ...


@dataclass
class RetryPolicy:
    attempts: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0


def _status(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class LiteLLMModel:
    """A provider model through litellm, with one retry layer owned here."""

    def __init__(self, name: str, *, api_base: str | None = None, policy: RetryPolicy | None = None) -> None:
        self.name = name
        self.api_base = api_base
        self.policy = policy or RetryPolicy()

    def _kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.name, "max_retries": 0, "num_retries": 0}
        if self.api_base:
            kw["api_base"] = self.api_base
            if self.name.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
                kw["api_key"] = "not-needed"  # local OpenAI-compatible servers often need no key
        return kw

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        litellm = await asyncio.to_thread(litellm_module)
        deadline = time.monotonic() + timeout
        errors: list[str] = []
        for attempt in range(1, self.policy.attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                response = await asyncio.wait_for(
                    litellm.acompletion(
                        messages=messages, tools=tools, tool_choice="auto", max_tokens=max_tokens,
                        timeout=remaining, **self._kwargs(),
                    ),
                    timeout=remaining,
                )
            except TimeoutError:
                errors.append(f"attempt {attempt}: no complete answer within {remaining:.0f}s")
                delay = self._backoff(attempt, None)
            except litellm.exceptions.openai.OpenAIError as exc:  # base of every error litellm maps
                status = _status(exc)
                errors.append(f"attempt {attempt}: {type(exc).__name__} {status or ''}".strip())
                if status is not None and status not in RETRYABLE:
                    raise ModelError(_describe(exc, status)) from None
                delay = self._backoff(attempt, _retry_after(exc))
            else:
                return self._reply(litellm, response, attempt, errors)
            if attempt < self.policy.attempts:
                await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        raise ModelError(f"provider kept failing after {len(errors)} attempts: {'; '.join(errors[-4:])}")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.policy.max_retry_after) + random.uniform(0, 0.25)
        delay: float = min(self.policy.max_delay, self.policy.base_delay * 2.0 ** (attempt - 1))
        return delay * random.uniform(0.75, 1.25)

    def _reply(self, litellm: ModuleType, response: Any, attempts: int, errors: list[str]) -> ModelReply:
        choice = response.choices[0]
        msg = choice.message
        calls = [
            ToolCall(id=c.id or f"call_{i}", name=c.function.name or "", arguments=c.function.arguments or "")
            for i, c in enumerate(msg.tool_calls or [])
        ]
        u = getattr(response, "usage", None)
        usage = Usage(
            prompt_tokens=int(getattr(u, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(u, "completion_tokens", 0) or 0),
        )
        return ModelReply(
            text=msg.content or "",
            tool_calls=calls,
            usage=usage,
            cost_usd=_cost(litellm, self.name, usage),
            finish_reason=choice.finish_reason or "stop",
            model=self.name,
            attempts=attempts,
            errors=errors,
        )


def _describe(exc: BaseException, status: int) -> str:
    kind = {401: "authentication failed", 403: "permission denied", 404: "model or endpoint not found"}
    lines = str(getattr(exc, "message", "") or exc).splitlines() or [""]
    message = redact(lines[0][:300])
    return f"provider refused the request ({status}, {kind.get(status, 'bad request')}): {message}"


def _cost(litellm: ModuleType, model: str, usage: Usage) -> float | None:
    """Cost from litellm's local price table; None (unknown) for models it does not list."""
    table: dict[str, dict[str, Any]] = litellm.model_cost
    info = table.get(model) or table.get(model.split("/", 1)[-1])
    if not info:
        return None
    inp = info.get("input_cost_per_token")
    out = info.get("output_cost_per_token")
    if inp is None or out is None:
        return None
    cost: float = float(inp) * usage.prompt_tokens + float(out) * usage.completion_tokens
    return cost


class ReplayModel:
    """Replays the assistant messages of a recorded session, in order; no provider, no key."""

    def __init__(self, path: Path) -> None:
        from prime_ci.session import read_session

        if not path.is_file():
            raise ConfigError(f"replay session not found: {path}")
        session = read_session(path)
        self.name = f"replay:{path.name}"
        self._replies = [m for m in session.messages() if m.get("role") == "assistant"]
        if not self._replies:
            raise ConfigError(f"replay session has no assistant messages: {path}")
        self._next = 0

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        if self._next >= len(self._replies):
            return ModelReply("(replay finished)", [], Usage(), 0.0, "stop", self.name)
        msg = self._replies[self._next]
        self._next += 1
        text = "".join(p.get("text", "") for p in msg["content"] if p.get("type") == "text")
        calls = [
            ToolCall(p.get("id", f"call_{i}"), p.get("name", ""), json.dumps(p.get("arguments", {})))
            for i, p in enumerate(msg["content"])
            if p.get("type") == "toolCall"
        ]
        u = msg.get("usage") or {}
        usage = Usage(int(u.get("input", 0)), int(u.get("output", 0)))
        return ModelReply(text, calls, usage, 0.0, "toolUse" if calls else "stop", self.name)


DEFAULT_WINDOW = 128_000


def context_window(model: Model) -> int:
    """The model's input window from litellm's local table; a conservative default for unknown models."""
    if isinstance(model, LiteLLMModel):
        table: dict[str, dict[str, Any]] = litellm_module().model_cost
        info = table.get(model.name) or table.get(model.name.split("/", 1)[-1]) or {}
        window = info.get("max_input_tokens") or info.get("max_tokens")
        if isinstance(window, int) and window > 0:
            return window
    return DEFAULT_WINDOW


def make_model(name: str, *, api_base: str | None = None, policy: RetryPolicy | None = None) -> Model:
    if name.startswith("replay:"):
        return ReplayModel(Path(name.removeprefix("replay:")))
    if "/" not in name:
        raise ConfigError(f"--model: expected a litellm id like openai/gpt-4o or replay:FILE, got {name!r}")
    start_import()
    return LiteLLMModel(name, api_base=api_base, policy=policy)
