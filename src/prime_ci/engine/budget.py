"""The budget ledger: turns, tokens, wall clock and cost, checked before every model call.

Token rule: before a call the ledger estimates the prompt at ``ceil(chars / 3)`` of its JSON (a deliberate
over-estimate: real tokenizers average 3.5–4 characters per token on code and prose) and clamps the
completion's ``max_tokens`` to what is left after that estimate. So the run's total can exceed
``--max-tokens`` only by how much the provider's prompt count exceeds the estimate for the last call:
``total <= budget + max(0, actual_prompt - estimated_prompt)``. A call is not made at all when fewer than
``MIN_COMPLETION`` tokens would remain for the answer.

All model calls, children's included, are made by the root host through one ledger, so children cannot
spend outside it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

MIN_COMPLETION = 16
WARN_AT = (0.5, 0.8, 0.95)


def estimate_tokens(chars: int) -> int:
    return math.ceil(chars / 3)


@dataclass
class Limits:
    max_turns: int = 40
    max_tokens: int = 2_000_000
    max_wall: float = 1800.0
    max_cost: float | None = None
    max_completion: int = 8192


@dataclass
class Budget:
    limits: Limits
    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    warned: set[tuple[str, float]] = field(default_factory=set)
    wall_offset: float = 0.0  # wall seconds already spent before a resume
    reserved: int = 0  # tokens held by calls in flight (concurrent children)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def elapsed(self) -> float:
        return self.wall_offset + time.monotonic() - self.started

    def wall_left(self) -> float:
        return self.limits.max_wall - self.elapsed()

    def exhausted(self, *, root: bool = True) -> str | None:
        """The stop reason if a limit is reached; ``root`` includes the root's turn cap."""
        if self.wall_left() <= 0:
            return "max_wall"
        if root and self.turns >= self.limits.max_turns:
            return "max_turns"
        if self.total_tokens >= self.limits.max_tokens:
            return "max_tokens"
        if self.limits.max_cost is not None and self.cost_usd >= self.limits.max_cost:
            return "max_cost"
        return None

    def completion_allowance(self, prompt_chars: int) -> int | None:
        """``max_tokens`` for the next call, or None when the token budget cannot fit one."""
        left = self.limits.max_tokens - self.total_tokens - self.reserved - estimate_tokens(prompt_chars)
        if left < MIN_COMPLETION:
            return None
        return min(self.limits.max_completion, left)

    def reserve(self, prompt_chars: int) -> tuple[int, int] | None:
        """Hold the worst case of one call (estimate + max completion): (max_tokens, held) or None."""
        allowance = self.completion_allowance(prompt_chars)
        if allowance is None:
            return None
        held = estimate_tokens(prompt_chars) + allowance
        self.reserved += held
        return allowance, held

    def release(self, held: int) -> None:
        self.reserved -= held

    def charge(self, prompt_tokens: int, completion_tokens: int, cost: float | None, *, root: bool) -> None:
        self.model_calls += 1
        if root:
            self.turns += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if cost is None:
            self.cost_known = False
        else:
            self.cost_usd += cost

    def warnings(self) -> list[str]:
        """Notes for the model the first time each 50/80/95% threshold is crossed."""
        used: list[tuple[str, float, str]] = [
            ("turns", self.turns / self.limits.max_turns, f"{self.turns}/{self.limits.max_turns} turns"),
            ("tokens", self.total_tokens / self.limits.max_tokens,
             f"{self.total_tokens}/{self.limits.max_tokens} tokens"),
            ("wall", self.elapsed() / self.limits.max_wall,
             f"{self.elapsed():.0f}s/{self.limits.max_wall:.0f}s wall clock"),
        ]
        if self.limits.max_cost:
            used.append(("cost", self.cost_usd / self.limits.max_cost,
                         f"${self.cost_usd:.4f}/${self.limits.max_cost:.2f}"))
        notes = []
        for name, frac, text in used:
            crossed = [t for t in WARN_AT if frac >= t and (name, t) not in self.warned]
            if crossed:
                self.warned.update((name, t) for t in crossed)
                notes.append(f"[budget] {max(crossed):.0%} of the {name} budget used ({text}).")
        return notes

    def usage(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "model_calls": self.model_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": round(self.cost_usd, 6) if self.cost_known else None,
        }

    def limits_dict(self) -> dict[str, Any]:
        return {
            "max_turns": self.limits.max_turns,
            "max_tokens": self.limits.max_tokens,
            "max_wall_s": self.limits.max_wall,
            "max_cost_usd": self.limits.max_cost,
        }
