"""Issue 23 item 10: a failed model call names its endpoint and the real cause; a silent server is given up on."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from prime_ci.errors import ModelError
from prime_ci.model.providers import OpenAICompatModel, RetryingModel, RetryPolicy
from prime_ci.model.routes import LiteLLMModel
from prime_ci.testing import ScriptedServer, hang, reply

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: every connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def quick(attempts: int = 2, attempt_timeout: float = 300.0) -> RetryPolicy:
    return RetryPolicy(attempts=attempts, base_delay=0.01, max_delay=0.01, attempt_timeout=attempt_timeout)


def failure(model: RetryingModel) -> str:
    with pytest.raises(ModelError) as raised:
        asyncio.run(model.complete(MESSAGES, [], max_tokens=16, timeout=60))
    return str(raised.value)


def test_a_refused_connection_is_said_on_the_direct_route(closed_port: int) -> None:
    base = f"http://127.0.0.1:{closed_port}/v1"
    text = failure(OpenAICompatModel("openai/m", base, policy=quick()))
    assert text.startswith(f"{base}/chat/completions kept failing after 2 attempts: connection refused"), text


@pytest.mark.parametrize("name", ["openai/m", "hosted_vllm/m", "anthropic/claude-sonnet-4-5"])
def test_a_refused_connection_is_said_on_the_litellm_route(closed_port: int, name: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    base = f"http://127.0.0.1:{closed_port}"
    text = failure(LiteLLMModel(name, api_base=base, policy=quick()))
    assert text.startswith(f"{name.split('/')[0]} ({base}) kept failing after 2 attempts: connection refused"), text
    assert "HTTP 500" not in text and "SSLContext" not in text  # litellm's wrapper, not the cause


def test_an_attempt_without_an_answer_ends_by_the_attempt_timeout_and_is_retried() -> None:
    with ScriptedServer([hang(3600), reply("at last")]) as srv:
        model = OpenAICompatModel("openai/m", srv.url, policy=quick(attempt_timeout=0.5))
        answered = asyncio.run(model.complete(MESSAGES, [], max_tokens=16, timeout=60))
        assert len(srv.chat_requests) == 2
    assert answered.text == "at last" and answered.attempts == 2
    assert answered.errors == ["no answer since 0.5s (the connection stayed open)"]


def test_a_server_that_never_answers_is_named_with_how_long_it_was_silent() -> None:
    with ScriptedServer([hang(3600)] * 2) as srv:
        text = failure(OpenAICompatModel("openai/m", srv.url, policy=quick(attempt_timeout=0.5)))
        assert len(srv.chat_requests) == 2
    assert text == (f"{srv.url}/chat/completions kept failing after 2 attempts: no answer since 0.5s (the "
                    "connection stayed open) (attempts 1-2)")


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
