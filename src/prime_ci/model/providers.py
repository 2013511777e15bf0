"""Model calls without litellm: the one retry layer, the direct OpenAI-compatible route and
the replay model.

Retries live here and only here: bounded attempts, exponential backoff with jitter, ``Retry-After``
honoured, an absolute deadline per attempt (``asyncio.wait_for``, not a read timeout: replies are not streamed,
so a server generating and a server that stopped answering look alike until the answer), and no retry for 4xx
other than 408/409/425/429. An attempt with no answer within ``RetryPolicy.attempt_timeout``
(``--model-timeout``) is a retryable failure. Every error names the endpoint and the real cause: a failed
connection is found in the exception chain, not taken from the client's wrapper (litellm reports a refused
connection as an HTTP 500). The direct route speaks the OpenAI chat-completions protocol with httpx to an
``--api-base`` endpoint (vLLM, llama.cpp, a gateway): litellm's per-call overhead grows with the history
and exceeds a whole turn of prime-ci's own work, so OpenAI-compatible endpoints skip it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prime_ci.durations import format_duration
from prime_ci.errors import ConfigError, ContextOverflow, ModelError
from prime_ci.isolation.redact import redact
from prime_ci.model.protocol import UNREADABLE, ModelReply, ToolCall
from prime_ci.model.usage import Cost, Usage, usage_from

if TYPE_CHECKING:
    import ssl

    import httpx

RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504, 529}
# what providers and servers say when the prompt is past the window (OpenAI, vLLM, llama.cpp, Anthropic, Ollama)
_OVERFLOW = re.compile(r"maximum context length|context[_ ]length[_ ]exceeded|context window|prompt is too long|"
                       r"exceeds? (?:the )?(?:available )?context|context size|too many tokens", re.I)
_WINDOW = re.compile(r"maximum context length is (\d+)|> ?(\d+) maximum|context size (?:of )?\(?(\d+)", re.I)
# litellm reports some missing keys as 500s: an absent or refused key is never retried
_AUTH = re.compile(r"missing \S+ api key|api[_ ]key (?:client option )?must be set|no api key|"
                   r"invalid (?:x-)?api[-_ ]key|incorrect api key|authentication", re.I)
# llama.cpp's server when its own parser cannot read what the model generated (a tool call cut off at the
# completion cap, or malformed): older builds and newer ones word it differently
_UNREADABLE = re.compile(r"does not match the expected \S+ format|failed to parse tool call", re.I)


DEFAULT_ATTEMPT_TIMEOUT = 300.0


@dataclass
class RetryPolicy:
    attempts: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0
    attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT  # no answer within this: the attempt failed (retryable)


class ProviderError(Exception):
    """One failed attempt: ``status`` None for connection errors and timeouts."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


_CONNECTION = {ConnectionRefusedError: "connection refused", ConnectionResetError: "connection reset by the server",
               ConnectionAbortedError: "connection aborted", BrokenPipeError: "connection closed by the server",
               socket.gaierror: "host name not resolved", TimeoutError: "connection timed out"}


def connection_cause(exc: BaseException) -> str | None:
    """What really failed under a client's error: the operating system's error deepest in the exception chain
    (``connection refused: [Errno 111] ...``), or None when the chain has none."""
    found: OSError | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__module__ in ("builtins", "socket") and isinstance(current, OSError):
            found = current
        current = current.__cause__ or current.__context__
    if found is None:
        return None
    kind = next((text for cls, text in _CONNECTION.items() if isinstance(found, cls)), "connection failed")
    return f"{kind}: {found}"


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def describe_refusal(status: int, message: str, where: str) -> str:
    kind = {401: "authentication failed", 403: "permission denied", 404: "model or endpoint not found"}
    first = (message.splitlines() or [""])[0][:300]
    return f"{where} refused the request ({status}, {kind.get(status, 'bad request')}): {redact(first)}"


def _overflow(exc: ProviderError, where: str) -> ContextOverflow:
    found = _WINDOW.search(str(exc))
    window = next((int(g) for g in found.groups() if g), None) if found else None
    return ContextOverflow(f"{where}: the prompt is longer than the model's context window: {redact(str(exc)[:300])}",
                           window)


def summarize_errors(errors: list[str]) -> str:
    """Attempts that failed the same way, said once: ``HTTP 500: msg (attempts 1-4)``."""
    groups: list[tuple[str, list[int]]] = []
    for number, text in enumerate(errors, 1):
        if groups and groups[-1][0] == text:
            groups[-1][1].append(number)
        else:
            groups.append((text, [number]))
    parts = [f"{text} (attempt{'s' if len(ns) > 1 else ''} {ns[0]}{f'-{ns[-1]}' if len(ns) > 1 else ''})"
             for text, ns in groups]
    return "; ".join(parts[-3:])


Pricer = Callable[[Usage], Awaitable[Cost | None]]


async def unpriced(usage: Usage) -> Cost | None:
    """The pricer of a model whose price is unknown."""
    return None


class RetryingModel:
    """The retry loop; subclasses implement one attempt, raising ProviderError on failure."""

    name: str
    policy: RetryPolicy
    where: str  # the endpoint, for error messages: "anthropic (http://…)" or "http://host/v1/chat/completions"
    pricer: Pricer = staticmethod(unpriced)

    async def attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> ModelReply:
        raise NotImplementedError

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        deadline = time.monotonic() + timeout
        errors: list[str] = []
        unreadable = 0
        for number in range(1, self.policy.attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wait = min(remaining, self.policy.attempt_timeout)
            try:
                reply = await asyncio.wait_for(self.attempt(messages, tools, max_tokens, wait), wait)
            except TimeoutError:
                errors.append(f"no answer since {format_duration(wait)} (the connection stayed open)")
                delay = self._backoff(number, None)
            except ProviderError as exc:
                self._refuse(exc)
                errors.append(f"HTTP {exc.status}: {exc}" if exc.status is not None else str(exc))
                delay = self._backoff(number, exc.retry_after)
                unreadable = unreadable + 1 if exc.status == 500 and _UNREADABLE.search(str(exc)) else 0
                if unreadable == 2:  # the same generation again (a seed, greedy sampling): the turn says it
                    return ModelReply("", [], Usage(), None, UNREADABLE, self.name, attempts=number, errors=errors)
            else:
                reply.attempts, reply.errors = number, errors
                reply.cost = await self.pricer(reply.usage)
                return reply
            if number < self.policy.attempts:
                await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        raise ModelError(redact(f"{self.where} kept failing after {len(errors)} attempts: {summarize_errors(errors)}"))

    def _refuse(self, exc: ProviderError) -> None:
        """Raise at once for what retrying cannot fix: the window, authentication, any other 4xx."""
        text = str(exc)
        if exc.status in (400, 413) and _OVERFLOW.search(text):
            raise _overflow(exc, self.where) from None
        if exc.status in (401, 403) or (_AUTH.search(text) and exc.status not in (408, 429)):
            raise ModelError(describe_refusal(exc.status if exc.status in (401, 403) else 401, text,
                                              self.where)) from None
        if exc.status is not None and exc.status not in RETRYABLE:
            raise ModelError(describe_refusal(exc.status, text, self.where)) from None

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.policy.max_retry_after) + random.uniform(0, 0.25)
        delay: float = min(self.policy.max_delay, self.policy.base_delay * 2.0 ** (attempt - 1))
        return delay * random.uniform(0.75, 1.25)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The verifying TLS context of every httpx client here, built once a process: each build reads the whole CA
    bundle (~20 ms of CPU), and an httpx client builds one when it is created, https or not."""
    import httpx

    return httpx.create_ssl_context(trust_env=False)


class OpenAICompatModel(RetryingModel):
    """``openai/MODEL`` at ``--api-base``: chat completions over one keep-alive httpx connection."""

    def __init__(self, name: str, api_base: str, *, policy: RetryPolicy | None = None,
                 reasoning_effort: str | None = None, pricer: Pricer | None = None, seed: int | None = None) -> None:
        import httpx

        self.name = name
        self.policy = policy or RetryPolicy()
        self.api_base = api_base.rstrip("/")
        self.url = self.where = self.api_base + "/chat/completions"
        self.reasoning_effort = reasoning_effort
        self.seed = seed
        if pricer is not None:
            self.pricer = pricer
        key = os.environ.get("OPENAI_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(headers=self.headers, timeout=None, trust_env=False,
                                         verify=tls_context())
        self._httpx = httpx

    async def attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> ModelReply:
        body: dict[str, Any] = {"model": self.name.split("/", 1)[1], "messages": messages, "max_tokens": max_tokens}
        if tools:
            body.update(tools=tools, tool_choice="auto")
        if self.reasoning_effort:
            body["reasoning_effort"] = self.reasoning_effort
        if self.seed is not None:
            body["seed"] = self.seed
        try:
            # compact and ASCII-escaped: the body is the whole conversation, re-encoded every turn (lone
            # surrogates from cell output stay valid JSON as \udcxx escapes)
            content = json.dumps(body, separators=(",", ":")).encode("ascii")
            response = await self._client.post(self.url, content=content, headers={"Content-Type": "application/json"})
        except self._httpx.HTTPError as exc:
            raise ProviderError(connection_cause(exc) or f"{type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            raise ProviderError(_error_text(response.text), response.status_code,
                                parse_retry_after(response.headers.get("retry-after")))
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):  # RecursionError: nested too deep
            raise ProviderError(f"malformed response body: {response.text[:200]!r}") from None
        calls = [ToolCall(c.get("id") or f"call_{i}", c["function"].get("name") or "",
                          c["function"].get("arguments") or "")
                 for i, c in enumerate(message.get("tool_calls") or [])]
        return ModelReply(message.get("content") or "", calls, usage_from(data.get("usage")), None,
                          choice.get("finish_reason") or "stop", self.name,
                          thinking=str(message.get("reasoning_content") or message.get("reasoning") or ""))


async def discover_window(api_base: str, model_id: str, headers: dict[str, str] | None = None) -> int | None:
    """The context window an OpenAI-compatible server advertises for ``model_id`` in ``GET /models`` (vLLM's
    ``max_model_len``, llama.cpp's ``meta.n_ctx``/``n_ctx_train``, ``context_length`` of other gateways)."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=5.0, trust_env=False, headers=headers or {},
                                     verify=tls_context()) as client:
            entries = await model_entries(client, api_base)
    except httpx.HTTPError:
        return None
    chosen = [e for e in entries if e.get("id") == model_id] or (entries if len(entries) == 1 else [])
    for entry in chosen:
        meta = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
        for value in (entry.get("max_model_len"), meta.get("n_ctx"), meta.get("n_ctx_train"),
                      entry.get("context_length"), entry.get("context_window")):
            if isinstance(value, int) and value > 0:
                return value
    return None


async def model_entries(client: httpx.AsyncClient, api_base: str) -> list[dict[str, Any]]:
    """The entries of an OpenAI-compatible server's ``GET /models`` (``data``), [] when it answers otherwise."""
    response = await client.get(api_base.rstrip("/") + "/models")
    try:
        entries = response.json().get("data") if response.status_code == 200 else None
    except (ValueError, AttributeError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _error_text(body: str) -> str:
    try:
        error = json.loads(body).get("error", {})
        return str(error.get("message", body) if isinstance(error, dict) else error)
    except (ValueError, AttributeError):
        return body[:300]


class ReplayModel:
    """Replays the assistant messages of a recorded session's active branch, in order; no provider, no key."""

    def __init__(self, path: Path) -> None:
        from prime_ci.session.log import read_session

        if not path.is_file():
            raise ConfigError(f"replay session not found: {path}")
        session = read_session(path)
        self.path = path
        self.name = f"replay:{path.name}"
        self._replies = [e["message"] for e in session.active_path()
                         if e.get("type") == "message" and isinstance(e.get("message"), dict)
                         and e["message"].get("role") == "assistant"]
        if not self._replies:
            raise ConfigError(f"replay session has no assistant messages: {path}")
        self.position = 0

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        if self.position >= len(self._replies):
            return ModelReply("(replay finished)", [], Usage(), Cost(), "stop", self.name)
        msg = self._replies[self.position]
        self.position += 1
        text = "".join(p.get("text", "") for p in msg["content"] if p.get("type") == "text")
        calls = [
            ToolCall(p.get("id", f"call_{i}"), p.get("name", ""), json.dumps(p.get("arguments", {})))
            for i, p in enumerate(msg["content"])
            if p.get("type") == "toolCall"
        ]
        u = msg.get("usage") or {}
        cost = Cost.from_json(u["cost"] if isinstance(u.get("cost"), dict) else {})
        return ModelReply(text, calls, Usage.from_session(u), cost, "toolUse" if calls else "stop", self.name)

    def for_child(self, name: str) -> ReplayModel:
        """The recording of the child named ``name`` in the recorded run: a run's artifacts directory keeps it
        in ``children/<name>/session.jsonl`` beside the root's ``session.jsonl``."""
        path = self.path.parent / "children" / name / "session.jsonl"
        if not path.is_file():
            raise ConfigError(f"the replayed run has no recorded child named {name!r} ({path})")
        return ReplayModel(path)
