"""Model calls through litellm: the only module that imports it, and only in the root host process.

litellm takes seconds to import, so ``start_import()`` begins it on a background thread at start-up while
the worktree and kernel come up. Its own retries are off; the one retry layer is ``RetryingModel``
(providers.py), shared with the direct OpenAI-compatible route.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from prime_ci.errors import ConfigError
from prime_ci.model.providers import (
    Model,
    ModelReply,
    OpenAICompatModel,
    ProviderError,
    ReplayModel,
    RetryingModel,
    RetryPolicy,
    ToolCall,
    Usage,
    parse_retry_after,
)

__all__ = ["LiteLLMModel", "Model", "ModelReply", "ReplayModel", "RetryPolicy", "ToolCall", "Usage", "make_model"]

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
        # no logging callbacks are ever registered; without this litellm still copies and walks the whole
        # history into a logging payload after every call (~3 ms of CPU a call at 150 turns)
        litellm.turn_off_message_logging = True
        gc.freeze()  # litellm's hundreds of thousands of import-time objects: never garbage, never to be scanned
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


# litellm caches its HTTP clients by their settings, timeout included: a per-call timeout (what is left of the
# deadline) missed the cache every time, a new client and connection per call (~3 ms). The deadline is
# enforced around the attempt by RetryingModel.complete instead.
CLIENT_TIMEOUT = 3600.0


class LiteLLMModel(RetryingModel):
    """A provider model through litellm (litellm's own retries off: the retry layer is RetryingModel's)."""

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

    async def attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> ModelReply:
        # a thread only while the background import may still be running: not a thread hop per call
        litellm = _module if _module is not None else await asyncio.to_thread(litellm_module)
        try:
            response = await litellm.acompletion(messages=messages, tools=tools or None,
                                                 tool_choice="auto" if tools else None, max_tokens=max_tokens,
                                                 timeout=CLIENT_TIMEOUT, **self._kwargs())
        except litellm.exceptions.openai.OpenAIError as exc:  # base of every error litellm maps
            status = getattr(exc, "status_code", None)
            headers = getattr(getattr(exc, "response", None), "headers", None)
            retry_after = parse_retry_after(headers.get("retry-after") if headers is not None else None)
            message = str(getattr(exc, "message", "") or exc)
            raise ProviderError(f"{type(exc).__name__}: {message}", status if isinstance(status, int) else None,
                                retry_after) from None
        return self._reply(litellm, response)

    def _reply(self, litellm: ModuleType, response: Any) -> ModelReply:
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
        return ModelReply(text=msg.content or "", tool_calls=calls, usage=usage,
                          cost_usd=_cost(litellm, self.name, usage), finish_reason=choice.finish_reason or "stop",
                          model=self.name)


def _model_info(litellm: ModuleType, model: str) -> dict[str, Any]:
    """litellm's local table entry for ``provider/model`` (or the bare model name); empty when unknown."""
    table: dict[str, dict[str, Any]] = litellm.model_cost
    return table.get(model) or table.get(model.split("/", 1)[-1]) or {}


def _prices(litellm: ModuleType, model: str) -> tuple[float, float] | None:
    """USD per prompt token and per completion token from litellm's local table; None for unlisted models."""
    info = _model_info(litellm, model)
    inp, out = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    return None if inp is None or out is None else (float(inp), float(out))


def _cost(litellm: ModuleType, model: str, usage: Usage) -> float | None:
    """Cost from litellm's local price table; None (unknown) for models it does not list."""
    price = _prices(litellm, model)
    return None if price is None else price[0] * usage.prompt_tokens + price[1] * usage.completion_tokens


def prices(model: Model) -> tuple[float, float] | None:
    """The prices ``_cost`` charges a model's calls at (the budget reserves with them); None when unknown."""
    return _prices(litellm_module(), model.name) if isinstance(model, LiteLLMModel) else None


DEFAULT_WINDOW = 128_000


def context_window(model: Model) -> int:
    """The model's input window from litellm's local table; a conservative default for unknown models."""
    if isinstance(model, LiteLLMModel):
        info = _model_info(litellm_module(), model.name)
        window = info.get("max_input_tokens") or info.get("max_tokens")
        if isinstance(window, int) and window > 0:
            return window
    return DEFAULT_WINDOW


def make_model(name: str, *, api_base: str | None = None, policy: RetryPolicy | None = None) -> Model:
    """``replay:FILE``; ``openai/M`` with ``--api-base``: the direct OpenAI-compatible route (unless
    ``PRIME_CI_ROUTE=litellm``); anything else through litellm."""
    if name.startswith("replay:"):
        return ReplayModel(Path(name.removeprefix("replay:")))
    if "/" not in name:
        raise ConfigError(f"--model: expected a litellm id like openai/gpt-4o or replay:FILE, got {name!r}")
    if name.startswith("openai/") and api_base and os.environ.get("PRIME_CI_ROUTE", "direct") != "litellm":
        return OpenAICompatModel(name, api_base, policy=policy)
    start_import()
    return LiteLLMModel(name, api_base=api_base, policy=policy)
