"""Issue 24 item 10: under --max-cost, the money held by calls still in flight counts: two concurrent calls cannot
together spend more than the cap (the token ledger has its own concurrent test)."""

from __future__ import annotations

import asyncio
from typing import Any

from prime_ci.loop.budget import Budget, BudgetExhausted, Limits, StopReason
from prime_ci.model.protocol import ModelReply
from prime_ci.model.usage import Cost, Usage
from prime_ci.testing.fakes import ModelCall, ScriptedModel

PRICE = (1e-6, 1e-5)  # USD per prompt token, per completion token
MAX_COST = 0.05  # less than one full completion allowance (8192 tokens: $0.08)


def spend_all(release: asyncio.Event) -> Any:
    """A model step that waits until the test releases it, then uses every completion token it was allowed."""

    async def step(call: ModelCall) -> ModelReply:
        await release.wait()
        return ModelReply("a long answer", [], Usage(10, call.max_tokens),
                          Cost(input=10 * PRICE[0], output=call.max_tokens * PRICE[1]), "stop", "scripted/model")

    return step


def test_two_calls_in_flight_cannot_together_exceed_max_cost() -> None:
    async def scenario() -> tuple[Budget, ScriptedModel, list[Any]]:
        release = asyncio.Event()
        model = ScriptedModel([spend_all(release), spend_all(release)])
        budget = Budget(Limits(max_cost=MAX_COST), pricing=lambda m: PRICE)
        messages = [{"role": "user", "content": "work"}]
        tasks = [asyncio.create_task(budget.call(model, messages, [], turn=False, prompt_chars=20))
                 for _ in range(2)]
        async with asyncio.timeout(10):  # until both reached the model or were refused
            while len(model.calls) + sum(t.done() for t in tasks) < 2:
                await asyncio.sleep(0)
        release.set()
        return budget, model, await asyncio.gather(*tasks, return_exceptions=True)

    budget, model, outcomes = asyncio.run(scenario())
    assert len(model.calls) == 1, [c.max_tokens for c in model.calls]
    refused = [o for o in outcomes if isinstance(o, BudgetExhausted)]
    assert len(refused) == 1 and refused[0].reason is StopReason.MAX_COST, outcomes
    assert budget.cost_usd <= MAX_COST + 1e-12, budget.usage()  # float sums
    assert budget.reserved == 0 and abs(budget.reserved_cost) < 1e-12, "every reservation is released"
