"""The context window an OpenAI-compatible server advertises in /v1/models (issue 40): llama.cpp's is ``meta.n_ctx``
(what ``llama-server -c`` set), not ``meta.n_ctx_train`` (what the model was trained on, larger); vLLM's is
``max_model_len``. The scripted server lists each under its own server's name only."""

from __future__ import annotations

import asyncio

import pytest

from prime_ci.model.routes import context_window, make_model
from prime_ci.testing import ScriptedServer


@pytest.mark.parametrize("strict", [True, False], ids=["llama.cpp", "vllm"])
def test_the_window_is_the_one_the_server_serves(strict: bool) -> None:
    with ScriptedServer(strict=strict, context_window=2048) as srv:
        window, source = asyncio.run(context_window(make_model("openai/scripted-model", api_base=srv.url)))
    assert (window, source) == (2048, "the server's /models")
