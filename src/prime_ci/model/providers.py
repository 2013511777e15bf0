"""Model calls without litellm: the reply types, the one retry layer, the direct OpenAI-compatible route and
the replay model.

Retries live here and only here: bounded attempts, exponential backoff with jitter, ``Retry-After``
honoured, an absolute deadline per attempt (``asyncio.wait_for``, not a read timeout), and no retry for 4xx
other than 408/409/425/429. The direct route speaks the OpenAI chat-completions protocol with httpx to an
``--api-base`` endpoint (vLLM, llama.cpp, a gateway): litellm's per-call overhead grows with the history
and exceeds a whole turn of prime-ci's own work, so OpenAI-compatible endpoints skip it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prime_ci.errors import ConfigError, ModelError
from prime_ci.isolation.redact import redact

RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504, 529}


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


class ProviderError(Exception):
    """One failed attempt: ``status`` None for connection errors and timeouts."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def describe_refusal(status: int, message: str) -> str:
    kind = {401: "authentication failed", 403: "permission denied", 404: "model or endpoint not found"}
    first = (message.splitlines() or [""])[0][:300]
    return f"provider refused the request ({status}, {kind.get(status, 'bad request')}): {redact(first)}"


class RetryingModel:
    """The retry loop; subclasses implement one attempt, raising ProviderError on failure."""

    name: str
    policy: RetryPolicy

    async def attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> ModelReply:
        raise NotImplementedError

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        deadline = time.monotonic() + timeout
        errors: list[str] = []
        for number in range(1, self.policy.attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                reply = await asyncio.wait_for(self.attempt(messages, tools, max_tokens, remaining), remaining)
            except TimeoutError:
                errors.append(f"attempt {number}: no complete answer within {remaining:.0f}s")
                delay = self._backoff(number, None)
            except ProviderError as exc:
                errors.append(f"attempt {number}: {exc}")
                if exc.status is not None and exc.status not in RETRYABLE:
                    raise ModelError(describe_refusal(exc.status, str(exc))) from None
                delay = self._backoff(number, exc.retry_after)
            else:
                reply.attempts, reply.errors = number, errors
                return reply
            if number < self.policy.attempts:
                await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        raise ModelError(redact(f"provider kept failing after {len(errors)} attempts: {'; '.join(errors[-4:])}"))

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.policy.max_retry_after) + random.uniform(0, 0.25)
        delay: float = min(self.policy.max_delay, self.policy.base_delay * 2.0 ** (attempt - 1))
        return delay * random.uniform(0.75, 1.25)


class OpenAICompatModel(RetryingModel):
    """``openai/MODEL`` at ``--api-base``: chat completions over one keep-alive httpx connection."""

    def __init__(self, name: str, api_base: str, *, policy: RetryPolicy | None = None) -> None:
        import httpx

        self.name = name
        self.policy = policy or RetryPolicy()
        self.url = api_base.rstrip("/") + "/chat/completions"
        key = os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=None, trust_env=False)
        self._httpx = httpx

    async def attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> ModelReply:
        body: dict[str, Any] = {"model": self.name.split("/", 1)[1], "messages": messages, "max_tokens": max_tokens}
        if tools:
            body.update(tools=tools, tool_choice="auto")
        try:
            # compact and ASCII-escaped: the body is the whole conversation, re-encoded every turn (lone
            # surrogates from cell output stay valid JSON as \udcxx escapes)
            content = json.dumps(body, separators=(",", ":")).encode("ascii")
            response = await self._client.post(self.url, content=content, headers={"Content-Type": "application/json"})
        except self._httpx.HTTPError as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            raise ProviderError(_error_text(response.text), response.status_code,
                                parse_retry_after(response.headers.get("retry-after")))
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderError(f"malformed response body: {response.text[:200]!r}") from None
        calls = [ToolCall(c.get("id") or f"call_{i}", c["function"].get("name") or "",
                          c["function"].get("arguments") or "")
                 for i, c in enumerate(message.get("tool_calls") or [])]
        usage = data.get("usage") or {}
        return ModelReply(message.get("content") or "", calls,
                          Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
                          None, choice.get("finish_reason") or "stop", self.name)


def _error_text(body: str) -> str:
    try:
        error = json.loads(body).get("error", {})
        return str(error.get("message", body) if isinstance(error, dict) else error)
    except (ValueError, AttributeError):
        return body[:300]


class ReplayModel:
    """Replays the assistant messages of a recorded session, in order; no provider, no key."""

    def __init__(self, path: Path) -> None:
        from prime_ci.session.log import read_session

        if not path.is_file():
            raise ConfigError(f"replay session not found: {path}")
        session = read_session(path)
        self.name = f"replay:{path.name}"
        self._replies = [m for m in session.messages() if m.get("role") == "assistant"]
        if not self._replies:
            raise ConfigError(f"replay session has no assistant messages: {path}")
        self.position = 0

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        if self.position >= len(self._replies):
            return ModelReply("(replay finished)", [], Usage(), 0.0, "stop", self.name)
        msg = self._replies[self.position]
        self.position += 1
        text = "".join(p.get("text", "") for p in msg["content"] if p.get("type") == "text")
        calls = [
            ToolCall(p.get("id", f"call_{i}"), p.get("name", ""), json.dumps(p.get("arguments", {})))
            for i, p in enumerate(msg["content"])
            if p.get("type") == "toolCall"
        ]
        u = msg.get("usage") or {}
        usage = Usage(int(u.get("input", 0)), int(u.get("output", 0)))
        return ModelReply(text, calls, usage, 0.0, "toolUse" if calls else "stop", self.name)
