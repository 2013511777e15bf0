"""Issue 23 item 10: a failed model call names its endpoint and the real cause; a silent server is given up on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from prime_ci.model.providers import OpenAICompatModel
from unit.model.model_error_helpers import MESSAGES, failure, quick


def test_a_refused_connection_is_said_on_the_direct_route(closed_port: int) -> None:
    base = f"http://127.0.0.1:{closed_port}/v1"
    text = failure(OpenAICompatModel("openai/m", base, policy=quick()))
    assert text.startswith(f"{base}/chat/completions kept failing after 2 attempts: connection refused"), text


def test_a_call_still_waiting_is_named_by_the_ledger() -> None:
    from prime_ci.loop.budget import Budget, Limits

    class Silent:
        name, where = "openai/m", "http://127.0.0.1:1/v1/chat/completions"
        entered = asyncio.Event()

        async def complete(self, messages: Any, tools: Any, *, max_tokens: int, timeout: float) -> Any:
            self.entered.set()
            await asyncio.Event().wait()

    async def scenario() -> tuple[str, str]:
        budget, model = Budget(Limits()), Silent()
        call = asyncio.create_task(budget.call(model, MESSAGES, [], turn=True))
        await model.entered.wait()
        waiting = budget.waiting()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return waiting, budget.waiting(), budget.cut_short

    waiting, after, cut_short = asyncio.run(scenario())
    assert waiting.startswith("a model call to http://127.0.0.1:1/v1/chat/completions had no answer since ")
    assert after == "" and cut_short.startswith(waiting[:60])
