"""The budget ledger (turns, tokens, wall clock, cost) and the one metered model call, ``Budget.call``.

Every model call of a run goes through ``Budget.call``: the agent loop's turns, the children's calls (the root
makes them), compaction and refinement. It refuses a call when a budget is exhausted, reserves the call's
worst case, makes the call under the remaining wall clock, releases the reservation and charges what the
provider reported.

Token rule: the prompt is estimated from the characters of its JSON at the model's calibrated rate
(``model.usage.TokenRate``: the highest tokens-per-character ratio the provider reported for a whole prompt, plus
a margin; 2 characters a token before its first count), and every reply's prompt count feeds the rate. The
completion's ``max_tokens`` is clamped to what is left after that estimate and after what calls in flight hold
(and to the context window). So the run's total can exceed ``--max-tokens`` only by how
much the provider's prompt count exceeds the estimate for the last call:
``total <= budget + max(0, actual_prompt - estimated_prompt)``. When the model's prices are known (litellm's
table or ``--price-per-mtok``), the same rule holds for ``--max-cost``, reserved at the uncached price. A call
is not made at all when fewer than ``MIN_COMPLETION`` tokens would remain for the answer. A call abandoned at
the wall limit is charged its estimated prompt (and counted in ``abandoned_calls``): the provider may bill it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol

from prime_ci.activity import doing
from prime_ci.durations import format_duration
from prime_ci.errors import ModelError, PrimeCIError
from prime_ci.model.protocol import UNREADABLE, Model, ModelReply, endpoint
from prime_ci.model.usage import Cost, TokenRate, Usage, message_chars
from prime_ci.money import usd
from prime_ci.stops import StopReason

MIN_COMPLETION = 16
WARN_AT = (0.5, 0.8, 0.95)
MAX_CALL_S = 600.0
# the model enforces the call's timeout itself; this backstop only catches one that does not
GRACE_S = 5.0
Price = tuple[float, float]  # USD per prompt token, per completion token


class BudgetExhausted(PrimeCIError):
    """A model call was refused before it was made: ``reason`` names the budget that ran out."""

    def __init__(self, reason: StopReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass
class Limits:
    max_turns: int = 40
    max_tokens: int = 2_000_000
    max_wall: float = 1800.0
    max_cost: float | None = None
    max_completion: int = 8192
    call_timeout: float = MAX_CALL_S  # one metered call, its retries included


@dataclass(frozen=True)
class Snapshot:
    """The ledger at one moment: what limit checks and budget notes read; the root sends it to children."""

    turns: int
    max_turns: int
    total_tokens: int
    max_tokens: int
    elapsed_s: float
    max_wall_s: float
    cost_usd: float
    max_cost_usd: float | None

    def over(self, *, turn: bool) -> StopReason | None:
        """The stop reason if a limit is reached; ``turn`` includes the turn cap."""
        if self.elapsed_s >= self.max_wall_s:
            return StopReason.MAX_WALL
        if turn and self.turns >= self.max_turns:
            return StopReason.MAX_TURNS
        if self.total_tokens >= self.max_tokens:
            return StopReason.MAX_TOKENS
        if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            return StopReason.MAX_COST
        return None

    def notes(self, warned: set[tuple[str, float]]) -> list[str]:
        """Notes for the model the first time each 50/80/95% threshold is crossed (``warned`` remembers)."""
        used: list[tuple[str, float, str]] = [
            ("turns", self.turns / self.max_turns, f"{self.turns}/{self.max_turns} turns"),
            ("tokens", self.total_tokens / self.max_tokens, f"{self.total_tokens}/{self.max_tokens} tokens"),
            ("wall", self.elapsed_s / self.max_wall_s if self.max_wall_s > 0 else 1.0,
             f"{format_duration(self.elapsed_s)}/{format_duration(self.max_wall_s)} wall clock"),
        ]
        if self.max_cost_usd:
            used.append(("cost", self.cost_usd / self.max_cost_usd, f"{usd(self.cost_usd)}/{usd(self.max_cost_usd)}"))
        notes = []
        for name, frac, text in used:
            crossed = [t for t in WARN_AT if frac >= t and (name, t) not in warned]
            if crossed:
                warned.update((name, t) for t in crossed)
                notes.append(f"[budget] {max(crossed):.0%} of the {name} budget used ({text}).")
        return notes

    def aged(self, seconds: float) -> Snapshot:
        return replace(self, elapsed_s=self.elapsed_s + seconds)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Reservation:
    max_tokens: int  # the completion allowance handed to the model
    tokens: int  # held: estimated prompt + allowance
    cost: float  # held: their price (0 when the price is unknown)


class Meter(Protocol):
    """What the agent loop needs of a budget: the root's ``Budget``, or a child's view of the root's ledger."""

    @property
    def turns(self) -> int: ...

    async def call(self, model: Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, turn: bool,
                   max_tokens: int | None = None, prompt_chars: int | None = None,
                   window: int | None = None) -> ModelReply: ...

    def exhausted(self, *, turn: bool = True) -> StopReason | None: ...

    def wall_left(self) -> float: ...

    def warnings(self) -> list[str]: ...

    def usage(self) -> dict[str, Any]: ...


@dataclass
class Budget:
    limits: Limits
    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    model_calls: int = 0
    spent: Usage = field(default_factory=Usage)  # every call's tokens, summed
    abandoned_calls: int = 0  # calls given up at the wall limit, charged at their estimate
    cost_usd: float = 0.0
    cost_known: bool = True
    warned: set[tuple[str, float]] = field(default_factory=set)
    wall_offset: float = 0.0  # wall seconds already spent before a resume
    reserved: int = 0  # tokens held by calls in flight (concurrent children)
    reserved_cost: float = 0.0
    pricing: Callable[[Model], Price | None] | None = None  # per-token prices of a model, when known
    prices: dict[str, Price | None] = field(default_factory=dict)
    rates: dict[str, TokenRate] = field(default_factory=dict)  # per model name, calibrated by every reply
    in_flight: dict[int, tuple[str, float]] = field(default_factory=dict)  # calls waiting: (endpoint, since)
    cut_short: str = ""  # the call a cancellation (the wall clock, a signal) ended last, said as ``waiting`` says it

    @property
    def total_tokens(self) -> int:
        return self.spent.total_tokens

    def elapsed(self) -> float:
        return self.wall_offset + time.monotonic() - self.started

    def wall_left(self) -> float:
        return self.limits.max_wall - self.elapsed()

    def snapshot(self, *, turns: int | None = None, max_turns: int | None = None) -> Snapshot:
        """The ledger now; ``turns``/``max_turns`` replace the root's turn count (a child's own cap)."""
        return Snapshot(self.turns if turns is None else turns,
                        self.limits.max_turns if max_turns is None else max_turns, self.total_tokens,
                        self.limits.max_tokens, self.elapsed(), self.limits.max_wall, self.cost_usd,
                        self.limits.max_cost)

    def exhausted(self, *, turn: bool = True) -> StopReason | None:
        return self.snapshot().over(turn=turn)

    def warnings(self) -> list[str]:
        return self.snapshot().notes(self.warned)

    def reserve(self, estimate: int, price: Price | None = None, cap: int | None = None,
                window: int | None = None) -> Reservation | StopReason:
        """Hold the worst case of one call (estimated prompt tokens + completion allowance), or the budget that
        cannot fit one."""
        allowance = min(self.limits.max_completion,
                        self.limits.max_tokens - self.total_tokens - self.reserved - estimate)
        if window is not None and window - estimate >= MIN_COMPLETION:
            allowance = min(allowance, window - estimate)
        short = StopReason.MAX_TOKENS
        if price is not None and self.limits.max_cost is not None:
            money = self.limits.max_cost - self.cost_usd - self.reserved_cost - estimate * price[0]
            by_cost = math.floor(money / price[1]) if price[1] > 0 else (allowance if money >= 0 else -1)
            if by_cost < allowance:
                allowance, short = by_cost, StopReason.MAX_COST
        if allowance < MIN_COMPLETION:
            return short
        if cap is not None:
            allowance = max(1, min(allowance, cap))
        held = Reservation(allowance, estimate + allowance,
                           estimate * price[0] + allowance * price[1] if price is not None else 0.0)
        self.reserved += held.tokens
        self.reserved_cost += held.cost
        return held

    def release(self, held: Reservation) -> None:
        self.reserved -= held.tokens
        self.reserved_cost -= held.cost

    def charge(self, usage: Usage, cost: float | None, *, turn: bool) -> None:
        self.model_calls += 1
        if turn:
            self.turns += 1
        self.spent += usage
        if cost is None:
            self.cost_known = False
        else:
            self.cost_usd += cost

    async def call(self, model: Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, turn: bool,
                   max_tokens: int | None = None, prompt_chars: int | None = None, window: int | None = None,
                   timeout: float | None = None) -> ModelReply:
        """The metered call: refuse (``BudgetExhausted``) or reserve -> call -> release -> charge.

        ``turn``: a root turn (counted, and refused at the turn cap). ``max_tokens`` caps the completion
        further; ``prompt_chars`` is the caller's running size of ``messages`` and ``tools`` (saves measuring them);
        ``window``: the model's context window, which prompt and completion must fit together.
        """
        price = await self._price(model)
        if reason := self.exhausted(turn=turn):
            raise BudgetExhausted(reason, f"the {reason.value.removeprefix('max_')} budget is used up")
        chars = prompt_chars if prompt_chars is not None else message_chars(messages) + message_chars(tools)
        rate = self.rate(model)
        estimate = rate.tokens(chars)
        held = self.reserve(estimate, price, max_tokens, window)
        if isinstance(held, StopReason):
            raise BudgetExhausted(held, f"not enough {held.value.removeprefix('max_')} budget left for another call")
        limit = max(1.0, min(self.limits.call_timeout if timeout is None else timeout, self.wall_left()))
        key = id(held)
        self.in_flight[key] = endpoint(model), time.monotonic()
        try:
            with doing("model call", turn=turn):
                reply = await asyncio.wait_for(
                    model.complete(messages, tools, max_tokens=held.max_tokens, timeout=limit), limit + GRACE_S)
        except TimeoutError:
            self._abandoned(estimate, price, turn)
            raise ModelError(f"{endpoint(model)}: no answer since {format_duration(limit)}") from None
        except asyncio.CancelledError:  # the run's wall clock (or a signal) ended the wait: the request is dropped
            self._abandoned(estimate, price, turn)
            self.cut_short = self.waiting()
            raise
        finally:
            self.release(held)
            del self.in_flight[key]
        if reply.finish_reason == UNREADABLE and not reply.usage.total_tokens:
            # the server generated a reply it could not read and said nothing of its usage: charge the worst case
            reply.usage = Usage(prompt_tokens=estimate, completion_tokens=held.max_tokens)
            if price is not None:
                reply.cost = Cost(input=estimate * price[0], output=held.max_tokens * price[1])
        else:
            rate.observe(chars, reply.usage.prompt_tokens)
        self.charge(reply.usage, reply.cost_usd, turn=turn)
        return reply

    def rate(self, model: Model) -> TokenRate:
        """The model's tokens per character, shared by everything that estimates its prompts."""
        return self.rates.setdefault(model.name, TokenRate())

    def waiting(self) -> str:
        """The longest model call still waiting for its answer, said for a stop that cut it short; "" if none."""
        if not self.in_flight:
            return ""
        where, since = min(self.in_flight.values(), key=lambda call: call[1])
        return f"a model call to {where} had no answer since {format_duration(time.monotonic() - since)}"

    def _abandoned(self, estimate: int, price: Price | None, turn: bool) -> None:
        """A call given up before its answer: the provider may still bill the prompt it read."""
        self.abandoned_calls += 1
        self.charge(Usage(prompt_tokens=estimate), estimate * price[0] if price is not None else None, turn=turn)

    async def _price(self, model: Model) -> Price | None:
        if self.pricing is None:
            return None
        if model.name not in self.prices:  # the lookup may wait for litellm's import: off the event loop
            self.prices[model.name] = await asyncio.to_thread(self.pricing, model)
        return self.prices[model.name]

    def restore(self, usage: dict[str, Any], wall_spent: float) -> None:
        """Spend so far (a resume), from the last cumulative usage record."""
        self.turns, self.model_calls = int(usage.get("turns", 0)), int(usage.get("model_calls", 0))
        self.spent = Usage.from_json(usage)
        self.abandoned_calls = int(usage.get("abandoned_calls", 0))
        cost = usage.get("cost_usd")
        self.cost_known = cost is not None or not usage
        self.cost_usd = float(cost or 0.0)
        self.wall_offset = wall_spent

    def usage(self) -> dict[str, Any]:
        """The cumulative usage record (``prime_ci.usage``, result.json): ``total_tokens`` after the completion."""
        spent = self.spent.to_json()
        return {
            "turns": self.turns,
            "model_calls": self.model_calls,
            "prompt_tokens": spent.pop("prompt_tokens"),
            "completion_tokens": spent.pop("completion_tokens"),
            "total_tokens": self.total_tokens,
            **spent,
            "abandoned_calls": self.abandoned_calls,
            "cost_usd": round(self.cost_usd, 9) if self.cost_known else None,
        }

    def limits_dict(self) -> dict[str, Any]:
        return {
            "max_turns": self.limits.max_turns,
            "max_tokens": self.limits.max_tokens,
            "max_wall_s": self.limits.max_wall,
            "max_cost_usd": self.limits.max_cost,
        }
