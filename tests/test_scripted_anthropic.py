"""ScriptedServer's Anthropic Messages API and prompt-cache simulation, over loopback HTTP and through litellm."""

from __future__ import annotations

import http.client
import json
import math
from types import ModuleType
from typing import Any

import pytest

from prime_ci.model.routes import litellm_module
from prime_ci.testing import ScriptedServer, Step, error, ipython, reply, tool_call, truncated

MODEL = "anthropic/claude-sonnet-4-5"
EPH = {"type": "ephemeral"}
PARAMETERS = {"type": "object", "properties": {"code": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "ipython", "description": "Run code.", "parameters": PARAMETERS}}]
BODY: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "be brief",
                        "messages": [{"role": "user", "content": "hi"}]}


def post(srv: ScriptedServer, body: dict[str, Any], path: str = "/v1/messages") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        headers = {"Content-Type": "application/json", "x-api-key": "sk-ant-test"}
        conn.request("POST", path, json.dumps(body).encode(), headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def message(srv: ScriptedServer, body: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    status, _, data = post(srv, {**(body or BODY), **extra})
    assert status == 200, data
    result: dict[str, Any] = json.loads(data)
    return result


def events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for chunk in data.decode().split("\n\n"):
        if chunk:
            name, payload = chunk.split("\n")
            event = json.loads(payload.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            out.append(event)
    return out


def user(text: str, cache: bool = False) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text, **({"cache_control": EPH} if cache else {})}]}


def shared_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def split(usage: dict[str, Any]) -> tuple[int, int, int]:
    return usage["input_tokens"], usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]


@pytest.fixture(scope="module")
def llm() -> ModuleType:
    return litellm_module()


def ask(llm: ModuleType, srv: ScriptedServer, messages: list[dict[str, Any]], **kw: Any) -> Any:
    kw = {"max_tokens": 200, "num_retries": 0, "max_retries": 0, **kw}
    return llm.completion(model=MODEL, api_base=srv.root_url, api_key="sk-ant-test", messages=messages, **kw)


def test_reply_becomes_a_messages_response() -> None:
    step = reply("Running it.", [tool_call("ipython", {"code": "print(1)"}, id="toolu_fixed"),
                                 tool_call("other", {"a": [1]})], reasoning="First, think.")
    steps = [step, reply("plain"), reply(""), reply("x" * 400), reply("cut", finish_reason="length")]
    with ScriptedServer(steps) as srv:
        first, plain, empty = message(srv), message(srv), message(srv)
        capped, cut = message(srv, max_tokens=10), message(srv)
    assert {k: first[k] for k in ("type", "role", "model", "stop_reason", "stop_sequence")} == {
        "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "tool_use",
        "stop_sequence": None}
    assert first["id"].startswith("msg_")
    thinking, text, call, other = first["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] == "First, think." and thinking["signature"]
    assert text == {"type": "text", "text": "Running it."}
    assert call == {"type": "tool_use", "id": "toolu_fixed", "name": "ipython", "input": {"code": "print(1)"}}
    assert other["id"].startswith("toolu_") and other["input"] == {"a": [1]}
    # Without breakpoints the whole prompt is input: ceil(chars / 4) of its blocks' canonical JSON.
    blocks = [{"text": "be brief", "type": "text"}, {"text": "hi", "type": "text"}]
    prompt = math.ceil(sum(len(json.dumps(b)) for b in blocks) / 4)
    assert plain["usage"] == {"input_tokens": prompt, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
                              "output_tokens": math.ceil(len("plain") / 4)}
    assert plain["content"] == [{"type": "text", "text": "plain"}] and plain["stop_reason"] == "end_turn"
    assert empty["content"] == [] and empty["stop_reason"] == "end_turn"
    assert capped["stop_reason"] == "max_tokens" and capped["usage"]["output_tokens"] == 10
    assert cut["stop_reason"] == "max_tokens"


def test_paths_recording_and_scripted_usage() -> None:
    usage = {"cache_read_input_tokens": 7, "prompt_tokens": 3, "total_tokens": 99}
    with ScriptedServer([reply("a"), reply("b", usage=usage), reply("c")]) as srv:
        message(srv)
        status, _, data = post(srv, BODY, "/messages")
        missing, _, hint = post(srv, BODY, "/v1/v1/messages")
        bad, _, bad_body = post(srv, BODY, "/v1/chat/completions")  # a Messages body is still an OpenAI request
    assert status == 200 and json.loads(data)["usage"] | {"output_tokens": 0} == {
        "input_tokens": 3, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 0, "output_tokens": 0}
    assert missing == 404 and "root_url" in json.loads(hint)["error"]["message"]
    assert bad == 200 and json.loads(bad_body)["object"] == "chat.completion"
    assert [(r.path, r.api, r.step_kind) for r in srv.chat_requests] == [
        ("/v1/messages", "anthropic", "reply"), ("/messages", "anthropic", "reply"),
        ("/v1/chat/completions", "openai", "reply")]
    assert srv.chat_requests[0].headers["x-api-key"] == "sk-ant-test" and srv.chat_requests[0].body == BODY


def test_errors_in_anthropic_form() -> None:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
             429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
    steps: list[Step] = [error(s, f"e{s}", retry_after=2 if s == 429 else None) for s in kinds]
    steps += [reply(tool_calls=[tool_call("ipython", '{"code": ')]), reply(tool_calls=[tool_call("f", "[1]")])]
    with ScriptedServer(steps) as srv:
        results = [post(srv, BODY) for _ in kinds]
        malformed = [post(srv, BODY), post(srv, BODY)]
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        conn.request("POST", "/v1/messages", b"{nope")
        bad = conn.getresponse()
        bad_body = json.loads(bad.read())
        conn.close()
    for (status, headers, data), (code, kind) in zip(results, kinds.items(), strict=True):
        assert status == code
        assert json.loads(data) == {"type": "error", "error": {"type": kind, "message": f"e{code}"}}
        assert headers.get("retry-after") == ("2" if code == 429 else None)
    for status, _, data in malformed:
        err = json.loads(data)["error"]
        assert status == 500 and err["type"] == "api_error" and "not a JSON object" in err["message"]
    assert bad.status == 400 and bad_body["type"] == "error" and bad_body["error"]["type"] == "invalid_request_error"


def test_streamed_messages_and_truncation() -> None:
    broken = '{"code": "print(1)"'
    step = reply("Some text to split.", [tool_call("ipython", {"code": "x = 1"}), tool_call("bad", broken)],
                 reasoning="A thought to stream.")
    with ScriptedServer([step, step, truncated()]) as srv:
        unstreamed = post(srv, {**BODY, "stream": False})
        status, headers, data = post(srv, {**BODY, "stream": True})
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        conn.request("POST", "/v1/messages", json.dumps({**BODY, "stream": True}).encode())
        cut = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead) as exc:
            cut.read()
        conn.close()
    assert unstreamed[0] == 500  # a non-object argument has no non-streaming form...
    assert status == 200 and headers["content-type"] == "text/event-stream"
    got = events(data)
    assert got[0]["type"] == "message_start" and got[0]["message"]["content"] == []
    assert [e["type"] for e in got[-2:]] == ["message_delta", "message_stop"]
    assert got[-2]["delta"]["stop_reason"] == "tool_use" and got[-2]["usage"]["output_tokens"] > 1
    blocks: dict[int, dict[str, Any]] = {}
    for e in got:
        if e["type"] == "content_block_start":
            blocks[e["index"]] = dict(e["content_block"]) | {"partial": ""}
        elif e["type"] == "content_block_delta":
            d, block = e["delta"], blocks[e["index"]]
            for key, field in (("text", "text"), ("thinking", "thinking"), ("signature", "signature"),
                               ("partial_json", "partial")):
                block[field] = block.get(field, "") + d.get(key, "")
    assert sum(1 for e in got if e["type"] == "content_block_delta") > 6  # really in pieces
    thinking, text, good, bad = (blocks[i] for i in range(4))
    assert thinking["thinking"] == "A thought to stream." and thinking["signature"]
    assert text["text"] == "Some text to split."
    assert json.loads(good["partial"]) == {"code": "x = 1"} and good["id"].startswith("toolu_")
    assert bad["partial"] == broken  # ...but streaming sends it verbatim
    partial = exc.value.partial.decode()
    assert "message_start" in partial and "message_stop" not in partial


def test_breakpoint_cache_prefixes_lookback_and_limits() -> None:
    system = [{"type": "text", "text": "You are an agent. " * 30, "cache_control": EPH}]
    first = {**BODY, "system": system, "messages": [user("task one", cache=True)]}
    turn = [user("task one"), {"role": "assistant", "content": "ok"}, user("more", cache=True)]
    second = {**BODY, "system": system, "messages": turn}
    other_tail = {**BODY, "system": system, "messages": [*turn[:2], user("different", cache=True)]}
    plain = {**BODY, "messages": [user("task one"), user("more")]}
    with ScriptedServer(default=reply("ok")) as srv:
        a, b, c = (message(srv, body)["usage"] for body in (first, second, other_tail))
        again, cold = message(srv, first)["usage"], message(srv, {**first, "model": "claude-haiku"})["usage"]
        none = message(srv, plain)["usage"]
        srv.clear_cache()
        cleared = message(srv, first)["usage"]
    total_a = sum(split(a))
    assert split(a) == (0, 0, total_a)  # the breakpoint is on the last block: the whole prompt is written
    assert split(b) == (0, total_a, sum(split(b)) - total_a)  # the first prompt is a prefix of the second
    assert split(c) == (0, total_a, sum(split(c)) - total_a)  # hit at a boundary before the breakpoint
    assert split(again) == (0, total_a, 0)
    assert split(cold)[1] == 0 and split(cleared) == (0, 0, total_a)  # caches are per model; clear forgets
    assert none == none | {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}

    def parts(n: int, mark: int) -> dict[str, Any]:
        content = [{"type": "text", "text": f"b{i}", **({"cache_control": EPH} if i == mark else {})} for i in range(n)]
        return {**BODY, "system": None, "messages": [{"role": "user", "content": content}]}

    tool = {"name": "ipython", "input_schema": {"type": "object"}, "cache_control": EPH}
    with ScriptedServer(default=reply("ok")) as srv:
        seed = message(srv, parts(1, 0))["usage"]
        far, near = message(srv, parts(22, 21))["usage"], message(srv, parts(21, 20))["usage"]
        tools_first = message(srv, {**BODY, "tools": [tool]})["usage"]
        tools_again = message(srv, {**BODY, "tools": [tool], "messages": [user("else")]})["usage"]
        status, _, data = post(srv, {**BODY, "messages": [user(str(i), cache=True) for i in range(5)]})
        assert srv.pending == 0 and len(srv.rejected) == 1 and srv.rejected[0].step_kind == "rejected"
    assert split(near)[1] == sum(split(seed)) and split(far)[1] == 0  # lookback: 20 blocks before a breakpoint
    assert tools_first["cache_creation_input_tokens"] > 0 and tools_first["input_tokens"] > 0
    assert tools_again["cache_read_input_tokens"] == tools_first["cache_creation_input_tokens"]
    limit = "A maximum of 4 blocks with cache_control may be provided. Found 5."
    assert status == 400 and json.loads(data)["error"] == {"type": "invalid_request_error", "message": limit}
    with ScriptedServer(default=reply("ok"), min_cache_tokens=10**6) as srv:
        assert [split(message(srv, first)["usage"])[1:] for _ in range(2)] == [(0, 0), (0, 0)]


def test_messages_context_window() -> None:
    long = {**BODY, "messages": [user("word " * 600)]}
    with ScriptedServer([reply("fits")], context_window=600) as srv:
        too_long = post(srv, long)
        too_much = post(srv, {**BODY, "max_tokens": 600})
        fits = message(srv, {**BODY, "max_tokens": 500})
    prompt = sum(split(fits["usage"]))
    assert too_long[0] == 400 and json.loads(too_long[2])["error"]["type"] == "invalid_request_error"
    assert json.loads(too_long[2])["error"]["message"].startswith("prompt is too long: ")
    assert json.loads(too_long[2])["error"]["message"].endswith(" tokens > 600 maximum")
    assert json.loads(too_much[2])["error"]["message"] == (
        f"input length and `max_tokens` exceed context limit: {prompt} + 600 > 600, "
        "decrease input length or `max_tokens` and try again")
    assert [r.step_kind for r in srv.chat_requests] == ["rejected", "rejected", "reply"]


def test_litellm_anthropic_route(llm: ModuleType) -> None:
    step = reply("Let me run it.", [tool_call("ipython", {"code": "print(2)"})], reasoning="Think first.")
    system = {"role": "system", "content": [{"type": "text", "text": "Be an agent. " * 40, "cache_control": EPH}]}
    messages: list[dict[str, Any]] = [system, {"role": "user", "content": "go"}]
    with ScriptedServer([step, step, error(429, "slow", retry_after=3)]) as srv:
        out = ask(llm, srv, messages, tools=TOOLS)
        chunks = list(ask(llm, srv, messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}))
        streamed = llm.stream_chunk_builder(chunks, messages=messages)
        with pytest.raises(llm.RateLimitError) as exc:
            ask(llm, srv, messages)
        sent = srv.chat_requests[0]
    with ScriptedServer([step]) as fresh:
        raw = message(fresh, sent.body)["usage"]  # what the server said to litellm's first request
    assert sent.path == "/v1/messages" and sent.api == "anthropic" and sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.body["tools"][0]["name"] == "ipython" and sent.body["system"][0]["cache_control"] == EPH
    for result in (out, streamed):
        msg = result.choices[0].message
        assert result.choices[0].finish_reason == "tool_calls"
        assert msg.content == "Let me run it."
        call = msg.tool_calls[0]
        assert call.id.startswith("toolu_") and call.function.name == "ipython"
        assert json.loads(call.function.arguments) == {"code": "print(2)"}
        assert msg.reasoning_content == "Think first."
        assert msg.thinking_blocks[0]["thinking"] == "Think first." and msg.thinking_blocks[0]["signature"]
    inp, read, write = split(raw)
    assert read == 0 and write > 0
    usage = out.usage
    assert usage.prompt_tokens == inp + read + write  # litellm's prompt_tokens counts cache reads and writes
    assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (write, 0)
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens == raw["output_tokens"]
    s = streamed.usage  # the second request read what the first wrote
    assert (s.cache_read_input_tokens, s.prompt_tokens_details.cached_tokens) == (write, write)
    assert s.prompt_tokens == inp + write
    assert exc.value.litellm_response_headers["retry-after"] == "3"


@pytest.mark.parametrize("breakpoints", [True, False])
def test_litellm_conversation_reads_the_cache_only_with_breakpoints(llm: ModuleType, breakpoints: bool) -> None:
    mark = {"cache_control": EPH} if breakpoints else {}
    system = {"role": "system", "content": [{"type": "text", "text": "You are a coding agent. " * 40, **mark}]}
    messages: list[dict[str, Any]] = [system, {"role": "user", "content": [{"type": "text", "text": "fix it", **mark}]}]
    usages = []
    with ScriptedServer([ipython(f"step({i})") for i in range(3)] + [reply("done")]) as srv:
        for _ in range(4):
            out = ask(llm, srv, messages, tools=TOOLS)
            usages.append(out.usage)
            msg = out.choices[0].message
            if not msg.tool_calls:
                break
            for m in messages[1:]:  # the newest message alone keeps a breakpoint
                content = m.get("content")
                for part in content if isinstance(content, list) else []:
                    part.pop("cache_control", None)
            messages.append(msg.model_dump(exclude_none=True))
            messages.append({"role": "tool", "tool_call_id": msg.tool_calls[0].id,
                             "content": [{"type": "text", "text": "ok", **mark}]})
    assert len(usages) == 4 and srv.pending == 0
    for before, usage in zip([None, *usages], usages, strict=False):
        read, write = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
        if not breakpoints:
            assert (read, write, usage.prompt_tokens_details.cached_tokens) == (0, 0, 0)
        elif before is None:
            assert (read, write) == (0, usage.prompt_tokens)
        else:
            assert (read, write) == (before.prompt_tokens, usage.prompt_tokens - before.prompt_tokens)
            assert usage.prompt_tokens_details.cached_tokens == read


def test_litellm_reasoning_on_the_openai_route(llm: ModuleType) -> None:
    thought = "Weigh the options carefully."
    with ScriptedServer([reply("answer", reasoning=thought)] * 2) as srv:
        kw = {"model": "openai/scripted", "api_base": srv.url, "api_key": "x", "num_retries": 0,
              "messages": [{"role": "user", "content": "q"}]}
        out = llm.completion(**kw)
        chunks = list(llm.completion(**kw, stream=True, stream_options={"include_usage": True}))
        streamed = llm.stream_chunk_builder(chunks, messages=kw["messages"])
    for result in (out, streamed):
        msg = result.choices[0].message
        assert msg.content == "answer" and msg.reasoning_content == thought
        assert getattr(msg, "thinking_blocks", None) is None
        assert result.usage.completion_tokens_details.reasoning_tokens == math.ceil(len(thought) / 4)
        assert result.usage.completion_tokens == math.ceil(len("answer") / 4) + math.ceil(len(thought) / 4)


def test_litellm_context_window_strict_and_auto_cache(llm: ModuleType) -> None:
    big = [{"role": "system", "content": "x" * 8000}, {"role": "user", "content": "hi"}]
    with ScriptedServer([reply("never")], context_window=1000) as srv:
        for model, base in (("openai/scripted", srv.url), (MODEL, srv.root_url)):
            with pytest.raises(llm.ContextWindowExceededError):
                llm.completion(model=model, api_base=base, api_key="k", messages=big, max_tokens=10, num_retries=0)
        assert len(srv.rejected) == 2 and srv.pending == 1
    call = {"id": "c1", "type": "function", "function": {"name": "ipython", "arguments": "{}"}}
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"},
                                     {"role": "assistant", "content": None, "tool_calls": [call]},
                                     {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    with ScriptedServer([reply("first step")], strict=True) as srv:
        kw = {"model": "openai/scripted", "api_base": srv.url, "api_key": "k", "num_retries": 0}
        with pytest.raises(llm.InternalServerError, match="Expected 'content'"):
            llm.completion(messages=history, **kw)
        assert "content" not in srv.rejected[0].body["messages"][1]  # litellm drops "content": None
        history[1]["content"] = ""
        assert llm.completion(messages=history, **kw).choices[0].message.content == "first step"
    long = [{"role": "system", "content": "y" * 6000}]
    with ScriptedServer(default=reply("ok"), auto_cache=True) as srv:
        kw = {"model": "openai/scripted", "api_base": srv.url, "api_key": "k", "num_retries": 0}
        cold = llm.completion(messages=[*long, {"role": "user", "content": "a"}], **kw).usage
        warm = llm.completion(messages=[*long, {"role": "user", "content": "b"}], **kw).usage
        texts = ["[]" + "".join(json.dumps(m, sort_keys=True) for m in r.body["messages"]) for r in srv.requests]
    shared = shared_prefix(*texts)  # over the canonical message sequence, tools first
    assert cold.prompt_tokens_details.cached_tokens == 0
    assert warm.prompt_tokens_details.cached_tokens == shared // 4 // 128 * 128 > 1024
    assert warm.prompt_tokens > warm.prompt_tokens_details.cached_tokens
