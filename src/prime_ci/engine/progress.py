"""The run's progress as the console shows it: what it does now and its budgets, sampled twice a second.

The ticker reads the ledger and the open phases (:mod:`prime_ci.activity`); nothing on the hot path (a model
call, a cell's output) does any work for it. How a status is shown (a live line on a terminal, heartbeat lines
in a log) is the console's business (``prime_ci.cli.status``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from prime_ci.activity import Activity
from prime_ci.loop.budget import Budget

TICK_S = 0.5


@dataclass(frozen=True)
class Status:
    phase: str | None  # the latest open phase ("model call", "cell", "gate tests", ...), None between phases
    phase_s: float  # how long it has been running
    turn: int  # the turn in progress
    max_turns: int
    tokens: int
    max_tokens: int
    cost_usd: float | None  # None when a price is unknown
    max_cost_usd: float | None
    wall_s: float
    max_wall_s: float

    @classmethod
    def of(cls, budget: Budget, activity: Activity) -> Status:
        now = time.monotonic()
        phase = activity.latest()
        limits = budget.limits
        return cls(phase.label if phase else None, now - phase.since if phase else 0.0,
                   budget.turns + (1 if activity.in_turn_call() else 0), limits.max_turns,
                   budget.total_tokens, limits.max_tokens, budget.cost_usd if budget.cost_known else None,
                   limits.max_cost, budget.elapsed(), limits.max_wall)


class Progress(Protocol):
    """Where the ticker sends each status; ``close`` when the run's work is over (before its last lines)."""

    def update(self, status: Status) -> None: ...

    def close(self) -> None: ...


async def _tick(progress: Progress, budget: Budget, activity: Activity) -> None:
    while True:
        progress.update(Status.of(budget, activity))
        await asyncio.sleep(TICK_S)


def start_ticker(progress: Progress | None, budget: Budget, activity: Activity) -> asyncio.Task[None] | None:
    return asyncio.create_task(_tick(progress, budget, activity)) if progress is not None else None


def stop_ticker(ticker: asyncio.Task[None] | None, progress: Progress | None) -> None:
    """Cancelled at its sleep, the ticker updates nothing more: the line is cleared for good."""
    if ticker is not None:
        ticker.cancel()
    if progress is not None:
        progress.close()
