"""What one model call used and cost, in the provider's terms and in Prime Agent's session shape.

``prompt_tokens`` follows OpenAI's meaning on every route: it includes the tokens read from and written to the
prompt cache (``cache_read_tokens``, ``cache_write_tokens``); ``reasoning_tokens`` are part of
``completion_tokens``. Prime Agent's ``input`` is the uncached remainder.

A prompt's tokens are estimated from its characters (its messages and tools as JSON) at a rate calibrated from
the provider's own counts (``TokenRate``): no fixed characters-per-token figure is an upper bound (small models'
tokenizers average 2.5 characters a token on code), and the provider's count is what its window is measured in.
Before any reply a llama.cpp server's own count of the opening prompt stands for one (``engine/first_estimate.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

PRIOR_TOKENS_PER_CHAR = 0.5  # before the provider has counted a prompt: 2 characters a token
MARGIN = 1.1  # over the highest rate seen: the next prompt is the last one plus a little of anything
# no tokenizer spends more on JSON text (byte-level fallback on non-Latin scripts included): a count above it is a
# gateway's or a script's invention, not a rate, and would shrink every window to a sliver
MAX_TOKENS_PER_CHAR = 2.0


@dataclass
class TokenRate:
    """Tokens per character of one model's prompts: the highest ratio of a whole prompt's reported tokens to its
    characters seen so far (times ``MARGIN``), the prior before the first count. A prompt grows by appending, so
    its ratio moves slowly from one call to the next; a provider that still refuses it as too long is handled by
    the caller (compact, ask for less)."""

    observed: float = 0.0

    @property
    def per_char(self) -> float:
        return self.observed * MARGIN if self.observed > 0 else PRIOR_TOKENS_PER_CHAR

    def tokens(self, chars: int) -> int:
        return math.ceil(chars * self.per_char)

    def chars(self, tokens: int) -> int:
        return max(0, math.floor(tokens / self.per_char))

    def observe(self, chars: int, prompt_tokens: int) -> None:
        """One call's prompt: its characters as estimated, the tokens the provider counted."""
        if chars > 0 and 0 < prompt_tokens <= chars * MAX_TOKENS_PER_CHAR:
            self.observed = max(self.observed, prompt_tokens / chars)


def message_chars(message: Any) -> int:
    """What one message (or the tool list) counts for in a prompt's size."""
    return len(json.dumps(message, ensure_ascii=False))


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` at the prior rate (before any provider count)."""
    return TokenRate().tokens(len(text))


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def uncached_prompt_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cache_read_tokens - self.cache_write_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage:
        return cls(**{k: int(data.get(k) or 0) for k in cls.__dataclass_fields__})

    @classmethod
    def from_session(cls, data: dict[str, Any]) -> Usage:
        """The tokens of a session ``usage`` (``session_usage``'s shape: ``input`` without the cache)."""
        read, write = int(data.get("cacheRead") or 0), int(data.get("cacheWrite") or 0)
        return cls(int(data.get("input") or 0) + read + write, int(data.get("output") or 0), read, write)


def usage_from(reported: Any) -> Usage:
    """A provider's reported usage, a JSON object (the direct route) or litellm's usage object: cache reads
    (OpenAI's ``prompt_tokens_details.cached_tokens`` or Anthropic's ``cache_read_input_tokens``), cache writes
    and reasoning tokens; ``prompt_tokens`` includes both cache parts."""

    def count(obj: Any, name: str) -> int:
        return int(get(obj, name) or 0)

    def get(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

    details, completion = get(reported, "prompt_tokens_details"), get(reported, "completion_tokens_details")
    return Usage(count(reported, "prompt_tokens"), count(reported, "completion_tokens"),
                 cache_read_tokens=count(details, "cached_tokens") or count(reported, "cache_read_input_tokens"),
                 cache_write_tokens=count(reported, "cache_creation_input_tokens"),
                 reasoning_tokens=count(completion, "reasoning_tokens"))


@dataclass(frozen=True)
class Cost:
    """USD of one call, split like Prime Agent's usage cost; ``total`` is what the ledger charges."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    @property
    def total(self) -> float:
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_json(self) -> dict[str, float]:
        return {"input": self.input, "output": self.output, "cacheRead": self.cache_read,
                "cacheWrite": self.cache_write, "total": self.total}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cost:
        return cls(float(data.get("input") or 0.0), float(data.get("output") or 0.0),
                   float(data.get("cacheRead") or 0.0), float(data.get("cacheWrite") or 0.0))


def session_usage(usage: Usage, cost: Cost | None) -> dict[str, Any]:
    """Prime Agent's assistant ``usage``: ``input`` excludes the cache; cost zeros when the price is unknown
    (the ``prime_ci.usage`` record says ``cost_usd: null`` then)."""
    return {"input": usage.uncached_prompt_tokens, "output": usage.completion_tokens,
            "cacheRead": usage.cache_read_tokens, "cacheWrite": usage.cache_write_tokens,
            "totalTokens": usage.total_tokens, "cost": (cost or Cost()).to_json()}


@dataclass(frozen=True)
class UserPrice:
    """``--price-per-mtok IN,OUT[,CACHED]``: USD per million tokens for a model litellm does not list."""

    input: float
    output: float
    cached: float

    @classmethod
    def parse(cls, text: str) -> UserPrice:
        parts = [p.strip() for p in text.split(",")]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            values = []
        if len(values) not in (2, 3) or any(v < 0 for v in values):
            raise ValueError(f"expected IN,OUT[,CACHED] in USD per million tokens (e.g. 3,15,0.3), got {text!r}")
        return cls(values[0], values[1], values[2] if len(values) == 3 else values[0])

    def cost(self, usage: Usage) -> Cost:
        per = 1e-6
        return Cost(input=(usage.uncached_prompt_tokens + usage.cache_write_tokens) * self.input * per,
                    output=usage.completion_tokens * self.output * per,
                    cache_read=usage.cache_read_tokens * self.cached * per)

    def per_token(self) -> tuple[float, float]:
        return self.input * 1e-6, self.output * 1e-6
