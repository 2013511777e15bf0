"""Issue 23 item 10, the cases that wait: a refused connection on the litellm route (imports litellm), an attempt
without an answer retried after its timeout, and a server that never answers named with how long it was silent."""

from __future__ import annotations

import asyncio

import pytest

from prime_ci.model.providers import OpenAICompatModel
from prime_ci.model.routes import LiteLLMModel
from prime_ci.testing import ScriptedServer, hang, reply
from unit.model.model_error_helpers import MESSAGES, failure, quick


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
