"""A fake Model for the metered call, its prompt and litellm's local prices of gpt-4o-mini."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prime_ci.model.protocol import ModelReply
from prime_ci.model.usage import Cost, Usage

MINI = (1.5e-07, 6e-07)  # litellm's local prices of gpt-4o-mini, USD per prompt / completion token


MESSAGES = [{"role": "user", "content": "x" * 300}]


class FakeModel:
    """A ``Model`` that records each call's ``max_tokens``; ``gate`` holds calls until the test releases them."""

    def __init__(self, usage: Usage | None = None, cost: float | None = 0.001, *, error: Exception | None = None,
                 gate: asyncio.Event | None = None) -> None:
        self.name = "fake/model"
        self.usage, self.cost, self.error, self.gate = usage or Usage(100, 20), cost, error, gate
        self.calls: list[int] = []
        self.entered = asyncio.Event()

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int,
                       timeout: float) -> ModelReply:
        self.calls.append(max_tokens)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return ModelReply("ok", [], self.usage, None if self.cost is None else Cost(input=self.cost), "stop",
                          self.name)


def prompt_text(messages: list[dict[str, Any]] = MESSAGES) -> str:
    return json.dumps(messages) + json.dumps([])
