"""The scripted server's strict mode refuses earlier tool-call arguments that are not JSON, as llama.cpp does."""

from __future__ import annotations

import json

import httpx
import pytest

from prime_ci.testing import ScriptedServer, reply


def request(arguments: str) -> dict[str, object]:
    call = {"id": "call_1", "type": "function", "function": {"name": "ipython", "arguments": arguments}}
    return {"model": "scripted-model", "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "out"}]}


@pytest.mark.parametrize("arguments", ['{"code": "print(1', "", "{"])
def test_unreadable_arguments_get_llama_cpps_500_and_consume_no_step(arguments: str) -> None:
    with ScriptedServer([reply("answer")], strict=True) as srv:
        refused = httpx.post(srv.url + "/chat/completions", json=request(arguments))
        accepted = httpx.post(srv.url + "/chat/completions", json=request('{"code": "print(1)"}'))
        rejected = srv.rejected
    assert refused.status_code == 500
    error = refused.json()["error"]
    assert error["code"] == 500 and error["message"].startswith("Failed to parse tool call arguments as JSON")
    assert accepted.status_code == 200 and accepted.json()["choices"][0]["message"]["content"] == "answer"
    assert len(rejected) == 1 and "messages[1].tool_calls[0]" in (rejected[0].rejected or "")


def test_without_strict_mode_unreadable_arguments_are_answered() -> None:
    with ScriptedServer([reply("answer")]) as srv:
        response = httpx.post(srv.url + "/chat/completions", json=request('{"code": "print(1'))
    assert response.status_code == 200 and json.loads(response.text)["choices"][0]["message"]["content"] == "answer"
