"""Deterministic token counting and the two prompt-cache simulations of the scripted provider.

Tokens are ``ceil(chars / 4)`` of JSON text (times the server's ``usage_scale``). Caches keep no time:
entries never expire unless the owner calls ``clear()``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

# Anthropic checks for hits at up to 20 block boundaries before each breakpoint (besides the breakpoint).
LOOKBACK = 20


def tokens(chars: int, scale: float = 1.0) -> int:
    return round(math.ceil(chars / 4) * scale)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def without_cache_control(value: Any) -> Any:
    """`value` with every ``cache_control`` key removed: moving a breakpoint must not change what is cached."""
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


@dataclass(frozen=True)
class Block:
    """One block of an Anthropic prompt: `key` identifies it (content plus position), `chars` counts it."""

    key: str
    chars: int
    breakpoint: bool


@dataclass(frozen=True)
class CacheUsage:
    total: int  # every prompt token
    read: int
    write: int

    @property
    def uncached(self) -> int:
        return self.total - self.read - self.write


class BreakpointCache:
    """Anthropic's explicit prompt caching: only prefixes ending at a ``cache_control`` block are written."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._prefixes: set[str] = set()

    def clear(self) -> None:
        self._prefixes.clear()

    def account(self, scope: str, blocks: Sequence[Block], scale: float = 1.0) -> CacheUsage:
        """Look up, then write, the prefixes of `blocks` (a cache per `scope`, e.g. the model)."""
        sizes = [tokens(c, scale) for c in accumulate(b.chars for b in blocks)]
        digest = hashlib.sha256(scope.encode()).digest()
        hashes: list[str] = []
        for block in blocks:
            digest = hashlib.sha256(digest + block.key.encode()).digest()
            hashes.append(digest.hex())
        marks = [i for i, b in enumerate(blocks) if b.breakpoint]
        read = 0
        for mark in marks:
            hit = next((k for k in range(mark, max(-1, mark - LOOKBACK - 1), -1) if hashes[k] in self._prefixes), None)
            if hit is not None:
                read = max(read, sizes[hit])
        write = 0
        if marks:
            last = marks[-1]
            if hashes[last] not in self._prefixes and sizes[last] >= self.min_tokens:
                write = sizes[last] - read
            self._prefixes.update(hashes[m] for m in marks if sizes[m] >= self.min_tokens)
        return CacheUsage(sizes[-1] if sizes else 0, read, write)


def common_prefix(a: str, b: str) -> int:
    # Binary search on slice equality: C-speed comparisons instead of a Python loop per character.
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PrefixCache:
    """OpenAI-style automatic caching: the longest prefix shared with any earlier prompt, in `granularity` steps."""

    def __init__(self, min_tokens: int = 1024, granularity: int = 128) -> None:
        self.min_tokens = min_tokens
        self.granularity = granularity
        self._seen: dict[str, dict[str, None]] = {}  # scope -> earlier prompt texts, in order, deduplicated

    def clear(self) -> None:
        self._seen.clear()

    def account(self, scope: str, text: str, scale: float = 1.0) -> int:
        """Cached tokens for prompt `text`, which is then remembered."""
        seen = self._seen.setdefault(scope, {})
        shared = max((common_prefix(text, earlier) for earlier in seen), default=0)
        seen[text] = None
        cached = math.floor(shared / 4 * scale) // self.granularity * self.granularity
        return cached if cached >= self.min_tokens else 0
