"""What the model error tests share: a quick-retry budget and the failure a metered model call raises."""

from __future__ import annotations

import asyncio

import pytest

from prime_ci.errors import ModelError
from prime_ci.model.providers import RetryingModel, RetryPolicy

MESSAGES = [{"role": "user", "content": "hi"}]


def quick(attempts: int = 2, attempt_timeout: float = 300.0) -> RetryPolicy:
    return RetryPolicy(attempts=attempts, base_delay=0.01, max_delay=0.01, attempt_timeout=attempt_timeout)


def failure(model: RetryingModel) -> str:
    with pytest.raises(ModelError) as raised:
        asyncio.run(model.complete(MESSAGES, [], max_tokens=16, timeout=60))
    return str(raised.value)
