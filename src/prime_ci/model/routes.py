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
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from prime_ci.errors import ConfigError
from prime_ci.model import table
from prime_ci.model.protocol import Model, ModelReply, ToolCall
from prime_ci.model.providers import (
    DEFAULT_ATTEMPT_TIMEOUT,
    OpenAICompatModel,
    Pricer,
    ProviderError,
    ReplayModel,
    RetryingModel,
    RetryPolicy,
    connection_cause,
    discover_window,
    parse_retry_after,
    unpriced,
)
from prime_ci.model.usage import Cost, Usage, UserPrice, usage_from

__all__ = ["LiteLLMModel", "ModelOptions", "ReplayModel", "RetryPolicy", "make_model"]

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


@dataclass(frozen=True)
class ModelOptions:
    """How calls are made, the same for the root and every child: ``--no-cache``, ``--reasoning-effort``,
    ``--price-per-mtok``, ``--seed``, ``--model-timeout``."""

    cache: bool = True
    reasoning_effort: str | None = None
    price: UserPrice | None = None
    seed: int | None = None
    timeout: float = DEFAULT_ATTEMPT_TIMEOUT


def model_options(cfg: Any) -> ModelOptions:
    """The model options of a run's settings (``RunConfig``)."""
    price = UserPrice.parse(cfg.price_per_mtok) if cfg.price_per_mtok else None
    return ModelOptions(cache=cfg.cache, reasoning_effort=cfg.reasoning_effort, price=price, seed=cfg.seed,
                        timeout=cfg.model_timeout)


class LiteLLMModel(RetryingModel):
    """A provider model through litellm (litellm's own retries off: the retry layer is RetryingModel's)."""

    def __init__(self, name: str, *, api_base: str | None = None, policy: RetryPolicy | None = None,
                 options: ModelOptions = ModelOptions()) -> None:
        self.name = name
        self.api_base = api_base
        self.policy = policy or RetryPolicy()
        self.options = options
        self.where = f"{name.split('/', 1)[0]} ({api_base or 'default endpoint'})"
        self.pricer = _pricer(name, options.price)
        self._breakpoints: bool | None = None  # Anthropic-format prompt caching, decided after the import

    def _kwargs(self, litellm: ModuleType, messages: list[dict[str, Any]]) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.name, "max_retries": 0, "num_retries": 0}
        if self.api_base:
            kw["api_base"] = self.api_base
            if self.name.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
                kw["api_key"] = "not-needed"  # local OpenAI-compatible servers often need no key
        if self.options.reasoning_effort:
            kw["reasoning_effort"] = self.options.reasoning_effort
        if self.options.seed is not None:  # providers without one drop it (litellm's drop_params)
            kw.update(seed=self.options.seed, drop_params=True)
        if self.options.cache and self._cache_control(litellm):
            kw["cache_control_injection_points"] = cache_points(messages)
        return kw

    def _cache_control(self, litellm: ModuleType) -> bool:
        if self._breakpoints is None:
            from litellm.llms.anthropic.common_utils import supports_anthropic_cache_control

            provider = litellm.get_llm_provider(self.name)[1]
            self._breakpoints = bool(supports_anthropic_cache_control(self.name, provider))
        return self._breakpoints

    async def attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int, timeout: float
    ) -> ModelReply:
        # a thread only while the background import may still be running: not a thread hop per call
        litellm = _module if _module is not None else await asyncio.to_thread(litellm_module)
        try:
            response = await litellm.acompletion(messages=messages, tools=tools or None,
                                                 tool_choice="auto" if tools else None, max_tokens=max_tokens,
                                                 timeout=CLIENT_TIMEOUT, **self._kwargs(litellm, messages))
        except litellm.exceptions.openai.OpenAIError as exc:  # base of every error litellm maps
            status = getattr(exc, "status_code", None)
            # the anthropic route keeps the provider's headers only in litellm_response_headers
            headers = getattr(exc, "litellm_response_headers", None) or getattr(
                getattr(exc, "response", None), "headers", None)
            retry_after = parse_retry_after(headers.get("retry-after") if headers else None)
            if (cause := connection_cause(exc)) is not None:  # litellm calls a failed connection an HTTP 500
                raise ProviderError(cause) from None
            message = str(getattr(exc, "message", "") or exc)
            raise ProviderError(f"{type(exc).__name__}: {message}", status if isinstance(status, int) else None,
                                retry_after) from None
        except RecursionError:  # a response body nested too deeply for the JSON parser
            raise ProviderError("malformed response body: JSON nested too deeply") from None
        return self._reply(response)

    def _reply(self, response: Any) -> ModelReply:
        choice = response.choices[0]
        msg = choice.message
        calls = [
            ToolCall(id=c.id or f"call_{i}", name=c.function.name or "", arguments=c.function.arguments or "")
            for i, c in enumerate(msg.tool_calls or [])
        ]
        blocks = getattr(msg, "thinking_blocks", None)
        usage = usage_from(getattr(response, "usage", None))
        return ModelReply(text=msg.content or "", tool_calls=calls, usage=usage, cost=None,
                          finish_reason=choice.finish_reason or "stop", model=self.name,
                          thinking=str(getattr(msg, "reasoning_content", None) or ""),
                          thinking_blocks=[dict(b) for b in blocks] if blocks else None)


def cache_points(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Breakpoints for Anthropic-format caching (at most 4 allowed): the system prompt, the end of the previous
    request (the message before the newest assistant reply: where the last cache write ended) and the newest
    message. Earlier messages are never rewritten, so each request's prefix is the last one's."""
    points: list[dict[str, Any]] = [{"location": "message", "role": "system"}]
    last_assistant = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"),
                          None)
    if last_assistant is not None and last_assistant - 1 > 0:
        points.append({"location": "message", "index": last_assistant - 1})
    if len(messages) > 1:
        points.append({"location": "message", "index": len(messages) - 1})
    return points


def litellm_cost(litellm: ModuleType, model: str, usage: Usage) -> Cost:
    """litellm's cost function over one reply's usage (cache-aware), split for the session's usage record."""
    usage_object = litellm.Usage(
        prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens, prompt_tokens_details={"cached_tokens": usage.cache_read_tokens},
        cache_read_input_tokens=usage.cache_read_tokens, cache_creation_input_tokens=usage.cache_write_tokens,
        completion_tokens_details={"reasoning_tokens": usage.reasoning_tokens})
    prompt_cost, completion_cost = litellm.cost_per_token(model=model, usage_object=usage_object)
    info = table.model_info(model)
    input_rate = float(info.get("input_cost_per_token") or 0.0)
    read = usage.cache_read_tokens * float(info.get("cache_read_input_token_cost") or input_rate)
    write = usage.cache_write_tokens * float(info.get("cache_creation_input_token_cost") or input_rate)
    return Cost(input=float(prompt_cost) - read - write, output=float(completion_cost), cache_read=read,
                cache_write=write)


def _pricer(model: str, price: UserPrice | None) -> Pricer:
    """How one model's replies are priced: the user's ``--price-per-mtok``, else litellm's cost function for a
    model its table lists (imported in the background for the direct route), else unknown."""
    if price is not None:
        async def user(usage: Usage) -> Cost | None:
            return price.cost(usage)
        return user
    if not table.is_priced(model):
        return unpriced
    start_import()

    async def listed(usage: Usage) -> Cost | None:
        litellm = _module if _module is not None else await asyncio.to_thread(litellm_module)
        return litellm_cost(litellm, model, usage)
    return listed


def prices(model: Model, price: UserPrice | None = None) -> tuple[float, float] | None:
    """USD per prompt token and per completion token at their full rate (what a reservation holds)."""
    if price is not None:
        return price.per_token()
    return table.per_token_prices(model.name) if isinstance(model, LiteLLMModel | OpenAICompatModel) else None


DEFAULT_WINDOW = 128_000
DEFAULT_COMPLETION = 8192
# a reply that is not streamed must arrive within proxies' idle timeouts: Anthropic's own SDK refuses
# non-streamed requests expected to take over 10 minutes, which is where this many output tokens lands
NON_STREAMED_COMPLETION_CAP = 21_333


async def context_window(model: Model) -> tuple[int, str]:
    """The model's input window and where it came from: the server's ``/models`` (an ``--api-base``
    OpenAI-compatible endpoint), litellm's table, or a default."""
    api_base = getattr(model, "api_base", None)
    if api_base and model.name.split("/", 1)[0] in ("openai", "hosted_vllm"):
        headers = getattr(model, "headers", None)
        found = await discover_window(api_base, model.name.split("/", 1)[1], headers)
        if found is not None:
            return found, "the server's /models"
    if isinstance(model, ReplayModel):  # its replies are recorded: no window to learn, no advice to give
        return DEFAULT_WINDOW, "the default; a replayed model has no window of its own"
    listed = table.window(model.name)
    if listed is not None:
        return listed, "litellm's model table"
    return DEFAULT_WINDOW, "the default for a model of unknown size; set --context-window"


def completion_limit(model: Model, flag: int | None) -> tuple[int, str | None]:
    """The per-call completion cap (``--max-completion-tokens``, else the table's output limit, else 8192) and a
    note when it had to be lowered for a non-streamed reply."""
    wanted = flag or table.max_output(model.name) or DEFAULT_COMPLETION
    if wanted > NON_STREAMED_COMPLETION_CAP:
        return NON_STREAMED_COMPLETION_CAP, (f"completion tokens per call capped at {NON_STREAMED_COMPLETION_CAP} "
                                             f"(of {wanted}): replies are not streamed, and longer ones risk "
                                             "provider and proxy idle timeouts")
    return wanted, None


def known_provider(name: str) -> bool:
    """Whether litellm can route ``provider/model``: its data files answer at once for nearly every provider;
    for the rest litellm itself is asked (an import of a few seconds, only then)."""
    if name.startswith("replay:"):
        return True
    provider = name.split("/", 1)[0]
    if "/" not in name or not provider:
        return False
    if provider in table.listed_providers():
        return True
    return provider in {str(getattr(p, "value", p)) for p in litellm_module().provider_list}


def child_model(name: str, root: str, api_base: str | None, options: ModelOptions) -> Model:
    """A model an rlm child asks for: one of the operator's provider (the credentials and endpoint the root
    model was given), never a replay file of the kernel's choosing."""
    provider = "replay" if root.startswith("replay:") else root.split("/", 1)[0]
    asked = "replay" if name.startswith("replay:") else name.split("/", 1)[0]
    if name != root and (asked == "replay" or asked != provider):
        raise ConfigError(f"only models of the run's provider ({provider}/...) may be used by a child; {name!r} is "
                          "not (its key or endpoint was not given to this run)")
    return make_model(name, api_base=api_base, options=options)


def make_model(name: str, *, api_base: str | None = None, policy: RetryPolicy | None = None,
               options: ModelOptions = ModelOptions()) -> Model:
    """``replay:FILE``; ``openai/M`` with ``--api-base``: the direct OpenAI-compatible route (unless
    ``PRIME_CI_ROUTE=litellm``); anything else through litellm."""
    if name.startswith("replay:"):
        return ReplayModel(Path(name.removeprefix("replay:")))
    policy = policy or RetryPolicy(attempt_timeout=options.timeout)
    if "/" not in name:
        raise ConfigError(f"--model: expected a litellm id like openai/gpt-4o or replay:FILE, got {name!r}")
    if name.startswith("openai/") and api_base and os.environ.get("PRIME_CI_ROUTE", "direct") != "litellm":
        return OpenAICompatModel(name, api_base, policy=policy, reasoning_effort=options.reasoning_effort,
                                 seed=options.seed,
                                 pricer=_pricer(name, options.price))
    start_import()
    return LiteLLMModel(name, api_base=api_base, policy=policy, options=options)
