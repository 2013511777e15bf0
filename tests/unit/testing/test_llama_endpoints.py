"""Issue 40: the scripted server's llama.cpp mode answers llama.cpp's own ``POST /tokenize`` and
``POST /apply-template`` (at the server's root) as llama.cpp does, with a deterministic tokenizer; a chat request's
prompt tokens are what those two count for it. Other modes have neither."""

from __future__ import annotations

from typing import Any

import httpx

from prime_ci.testing import ScriptedServer, reply

MESSAGES = [{"role": "system", "content": "You are a careful engineer."}, {"role": "user", "content": "Fix calc.py"}]
TOOLS = [{"type": "function", "function": {"name": "ipython", "parameters": {"type": "object"}}}]


def post(srv: ScriptedServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(srv.root_url + path, json=body)


def test_tokenize_answers_in_llama_cpps_shape_and_is_deterministic() -> None:
    with ScriptedServer(strict=True) as srv:
        plain = post(srv, "/tokenize", {"content": "Hello, world!"}).json()
        again = post(srv, "/tokenize", {"content": "Hello, world!"}).json()
        special = post(srv, "/tokenize", {"content": "Hello, world!", "add_special": True}).json()
        pieces = post(srv, "/tokenize", {"content": "Hello, world!", "with_pieces": True}).json()
        nothing = post(srv, "/tokenize", {}).json()
        kinds = [r.step_kind for r in srv.requests]
    assert plain == again and set(plain) == {"tokens"}
    assert len(plain["tokens"]) == 4 and all(isinstance(t, int) and t > 1 for t in plain["tokens"])
    assert special["tokens"] == [1, *plain["tokens"]]  # BOS first, as a model that adds it
    assert [p["piece"] for p in pieces["tokens"]] == ["Hell", "o, w", "orld", "!"]
    assert [p["id"] for p in pieces["tokens"]] == plain["tokens"]
    assert nothing == {"tokens": []}
    assert kinds == ["tokenize"] * 5 and srv.chat_requests == []  # no step consumed


def test_apply_template_then_tokenize_is_the_prompt_count_of_the_chat_request() -> None:
    body = {"model": "scripted-model", "messages": MESSAGES, "tools": TOOLS}
    with ScriptedServer([reply("done")], strict=True) as srv:
        rendered = post(srv, "/apply-template", body).json()
        counted = post(srv, "/tokenize", {"content": rendered["prompt"], "add_special": True}).json()
        usage = httpx.post(srv.url + "/chat/completions", json=body).json()["usage"]
        missing = post(srv, "/apply-template", {"tools": TOOLS})
        unreadable = post(srv, "/apply-template", {"messages": [
            *MESSAGES, {"role": "assistant", "content": None}]})
    assert set(rendered) == {"prompt"} and "Fix calc.py" in rendered["prompt"]
    assert usage["prompt_tokens"] == len(counted["tokens"])
    assert missing.status_code == 400 and missing.json()["error"]["code"] == 400
    assert unreadable.status_code == 500 and "Failed to apply chat template" in unreadable.json()["error"]["message"]


def test_only_llama_cpp_mode_has_them_and_an_older_build_lacks_apply_template() -> None:
    with ScriptedServer() as vllm:
        assert post(vllm, "/tokenize", {"content": "x"}).status_code == 404
        assert post(vllm, "/apply-template", {"messages": MESSAGES}).status_code == 404
    with ScriptedServer(strict=True, apply_template=False) as older:
        assert post(older, "/apply-template", {"messages": MESSAGES}).status_code == 404
        assert post(older, "/tokenize", {"content": "x"}).json()["tokens"]
