"""Tests for prime_ci.testing.ScriptedServer over real loopback HTTP (stdlib client only)."""

from __future__ import annotations

import http.client
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import prime_ci.testing as testing
from prime_ci.testing import (
    ScriptedServer,
    contains,
    drip,
    error,
    hang,
    ipython,
    raw,
    reply,
    steps_from_json,
    tool_call,
    truncated,
)

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def chat(
    srv: ScriptedServer, body: dict[str, Any] | None = None, *, timeout: float = 5.0, **extra: Any
) -> tuple[int, dict[str, str], bytes]:
    payload = {"model": "test-model", "messages": MESSAGES} if body is None else body
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-test"}
        conn.request("POST", "/v1/chat/completions", json.dumps({**payload, **extra}).encode(), headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def completion(srv: ScriptedServer, body: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    status, _, data = chat(srv, body, **extra)
    assert status == 200, data
    result: dict[str, Any] = json.loads(data)
    return result


def sse_events(data: bytes) -> list[str]:
    return [e.removeprefix("data: ") for e in data.decode().split("\n\n") if e.startswith("data: ")]


def rebuild_stream(events: list[str]) -> dict[str, Any]:
    """Reassemble streamed deltas the way OpenAI clients do."""
    content, finish, usage = "", None, None
    calls: dict[int, dict[str, Any]] = {}
    for event in events[:-1]:
        chunk = json.loads(event)
        assert chunk["object"] == "chat.completion.chunk"
        if chunk.get("usage"):
            assert chunk["choices"] == []
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls", []):
                slot = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                slot["name"] += tc.get("function", {}).get("name") or ""
                slot["arguments"] += tc.get("function", {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    tool_calls = [calls[i] for i in sorted(calls)]
    return {"content": content, "tool_calls": tool_calls, "finish": finish, "usage": usage}


def test_reply_with_text() -> None:
    with ScriptedServer([reply("hello there")]) as srv:
        assert srv.url == f"http://127.0.0.1:{srv.port}/v1"
        out = completion(srv)
    assert out["object"] == "chat.completion"
    assert out["model"] == "test-model"
    assert out["id"].startswith("chatcmpl-")
    choice = out["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "hello there"}
    assert choice["finish_reason"] == "stop"


def test_tool_call_with_arguments() -> None:
    steps = [
        reply("thinking", [tool_call("search", {"q": "x", "n": 3}, id="call_abc")]),
        ipython("print(1 + 1)"),
    ]
    with ScriptedServer(steps) as srv:
        first, second = completion(srv), completion(srv)
    msg = first["choices"][0]["message"]
    assert msg["content"] == "thinking"
    assert msg["tool_calls"][0]["id"] == "call_abc"
    assert msg["tool_calls"][0]["type"] == "function"
    assert msg["tool_calls"][0]["function"]["name"] == "search"
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"q": "x", "n": 3}
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    msg2 = second["choices"][0]["message"]
    assert msg2["content"] is None
    assert msg2["tool_calls"][0]["id"]  # generated when not scripted
    assert msg2["tool_calls"][0]["function"]["name"] == "ipython"
    assert json.loads(msg2["tool_calls"][0]["function"]["arguments"]) == {"code": "print(1 + 1)"}


def test_malformed_arguments_are_sent_verbatim() -> None:
    broken = '{"code": "print(1)"'
    with ScriptedServer([reply(tool_calls=[tool_call("ipython", broken)])]) as srv:
        out = completion(srv)
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == broken


def test_error_with_retry_after_repeats_then_succeeds() -> None:
    with ScriptedServer([error(429, "slow down", retry_after=2, times=2), reply("ok")]) as srv:
        results = [chat(srv) for _ in range(3)]
        assert srv.pending == 0
    for status, headers, data in results[:2]:
        assert status == 429
        assert headers["retry-after"] == "2"
        err = json.loads(data)["error"]
        assert err["message"] == "slow down"
        assert err["type"] == "rate_limit_error"
        assert "code" in err
    status, headers, data = results[2]
    assert status == 200 and "retry-after" not in headers
    assert json.loads(data)["choices"][0]["message"]["content"] == "ok"
    assert [r.step_kind for r in srv.chat_requests] == ["error", "error", "reply"]


def test_server_error_without_retry_after() -> None:
    with ScriptedServer([error(503)]) as srv:
        status, headers, data = chat(srv)
    assert status == 503 and "retry-after" not in headers
    assert json.loads(data)["error"] == {"message": "scripted error", "type": "server_error", "code": None}


def test_routing_by_contains() -> None:
    with ScriptedServer([reply("main-1"), reply("main-2")]) as srv:
        srv.route(contains("agent-B"), [reply("b-1"), reply("b-2")])
        parts = [{"role": "user", "content": [{"type": "text", "text": "I am agent-B"}]}]
        plain = [{"role": "user", "content": "agent-B again"}]
        texts = [
            completion(srv, body)["choices"][0]["message"]["content"]
            for body in (None, {"messages": parts}, {"messages": plain}, None, {"messages": parts})
        ]
    # Once its route is empty, agent B gets the default rather than a step meant for the main queue.
    assert texts == ["main-1", "b-1", "b-2", "main-2", "(script exhausted)"]
    assert srv.exhausted == 1
    assert contains("needle")({"messages": [{"role": "user", "content": None}]}) is False
    assert contains("needle")({"system": [{"type": "text", "text": "a needle"}], "messages": []}) is True
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "needle!"}]}
    assert contains("needle")({"messages": [{"role": "user", "content": [result]}]}) is True


def test_callable_script() -> None:
    def script(body: dict[str, Any]) -> testing.Step | None:
        last = body["messages"][-1]["content"]
        return None if last == "stop" else reply(f"echo: {last}")

    with ScriptedServer(script) as srv:
        first = completion(srv, {"messages": [{"role": "user", "content": "ping"}]})
        second = completion(srv, {"messages": [{"role": "user", "content": "stop"}]})
    assert first["choices"][0]["message"]["content"] == "echo: ping"
    assert second["choices"][0]["message"]["content"] == "(script exhausted)"
    assert srv.exhausted == 1
    assert [r.exhausted for r in srv.requests] == [False, True]


def test_streaming_reassembles_content_tool_calls_and_usage() -> None:
    step = reply(
        "Let me run some code for you.",
        [tool_call("ipython", {"code": "x = 1\nprint(x)"}), tool_call("other", '{"a": [1, 2]}', id="c2")],
    )
    with ScriptedServer([step, step]) as srv:
        plain = completion(srv)
        status, headers, data = chat(srv, stream=True)
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = sse_events(data)
    assert events[-1] == "[DONE]"
    assert sum(1 for e in events if '"content": "' in e and '"content": ""' not in e) >= 2  # several pieces
    got = rebuild_stream(events)
    msg = plain["choices"][0]["message"]
    assert got["content"] == msg["content"]
    assert [(c["name"], c["arguments"]) for c in got["tool_calls"]] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]
    ]
    assert got["tool_calls"][1]["id"] == "c2"
    assert got["finish"] == "tool_calls"
    assert got["usage"] == plain["usage"]
    first = json.loads(events[0])
    assert first["choices"][0]["delta"]["role"] == "assistant"


def test_truncated_stream_has_no_done() -> None:
    with ScriptedServer([truncated(), truncated("partial body")]) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        conn.request("POST", "/v1/chat/completions", json.dumps(body))
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead) as stream_exc:
            resp.read()
        conn.close()
        with pytest.raises(http.client.IncompleteRead) as plain_exc:
            chat(srv)
    partial = stream_exc.value.partial
    assert b"[DONE]" not in partial
    assert json.loads(sse_events(partial)[0])["choices"][0]["delta"]["role"] == "assistant"
    assert plain_exc.value.expected is not None and plain_exc.value.expected > 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain_exc.value.partial)


def test_exhausted_queue_returns_default_and_counts() -> None:
    with ScriptedServer([reply("only")]) as srv:
        texts = [completion(srv)["choices"][0]["message"]["content"] for _ in range(3)]
    assert texts == ["only", "(script exhausted)", "(script exhausted)"]
    assert srv.exhausted == 2
    with ScriptedServer(default=error(500, "no more")) as srv:
        status, _, data = chat(srv)
    assert status == 500 and json.loads(data)["error"]["message"] == "no more"
    assert srv.exhausted == 1


def test_usage_computation_and_scale() -> None:
    tools = [{"type": "function", "function": {"name": "ipython", "parameters": {"type": "object"}}}]
    body = {"model": "m", "messages": MESSAGES, "tools": tools}
    call = tool_call("ipython", {"code": "print(42)"})
    prompt = math.ceil(len(json.dumps(MESSAGES) + json.dumps(tools)) / 4)
    completion_tokens = math.ceil((len("abcdefghij") + len("ipython") + len(call.arguments)) / 4)
    with ScriptedServer([reply("abcdefghij", [call]), reply("")]) as srv:
        usage = completion(srv, body)["usage"]
        empty_usage = completion(srv, body)["usage"]
    assert usage == {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }
    assert empty_usage["completion_tokens"] == 1  # minimum
    with ScriptedServer([reply("abcdefghij", [call])], usage_scale=2.0) as srv:
        scaled = completion(srv, body)["usage"]
    assert scaled["prompt_tokens"] == 2 * prompt
    assert scaled["total_tokens"] == 2 * prompt + completion_tokens
    with ScriptedServer([reply("x", usage={"prompt_tokens": 7, "completion_tokens": 3})]) as srv:
        explicit = completion(srv, body)["usage"]
    assert explicit == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_max_tokens_gives_finish_reason_length() -> None:
    text = "word " * 40  # 50 completion tokens
    with ScriptedServer([reply(text), reply(text), reply("short")]) as srv:
        capped = completion(srv, max_tokens=10)
        capped_new = completion(srv, max_completion_tokens=5)
        short = completion(srv, max_tokens=10)
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["choices"][0]["message"]["content"] == text
    assert capped["usage"]["completion_tokens"] == 10
    assert capped["usage"]["total_tokens"] == capped["usage"]["prompt_tokens"] + 10
    assert capped_new["usage"]["completion_tokens"] == 5
    assert capped_new["choices"][0]["finish_reason"] == "length"
    assert short["choices"][0]["finish_reason"] == "stop"


def test_request_recording_and_other_endpoints() -> None:
    with ScriptedServer([reply("a"), error(500)]) as srv:
        before = time.monotonic()
        chat(srv)
        chat(srv, {"model": "x", "messages": [{"role": "user", "content": "second"}]})
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        conn.request("GET", "/v1/models")
        models = conn.getresponse()
        models_body = json.loads(models.read())
        conn.request("GET", "/v1/nope")
        missing = conn.getresponse()
        missing_body = json.loads(missing.read())
        conn.request("POST", "/chat/completions", b"{not json")
        bad = conn.getresponse()
        bad.read()
        conn.close()
        recorded = srv.wait_for_requests(5, timeout=30)
    assert models.status == 200 and models_body["object"] == "list" and models_body["data"][0]["id"]
    assert missing.status == 404 and "error" in missing_body
    assert bad.status == 400
    assert [r.step_kind for r in recorded] == ["reply", "error", "models", "not_found", "bad_request"]
    first, second = srv.chat_requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.body == {"model": "test-model", "messages": MESSAGES}
    assert json.loads(first.raw) == first.body
    assert second.body["messages"][0]["content"] == "second"
    assert before <= first.t <= second.t <= time.monotonic()
    assert recorded[4].raw == b"{not json" and recorded[4].body == {}
    with pytest.raises(TimeoutError):
        srv.wait_for_requests(6, timeout=0.05)


def test_keep_alive_and_nodelay() -> None:
    n = 20
    with ScriptedServer([reply(f"r{i}") for i in range(n)]) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
        texts = []
        for _ in range(n):
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            texts.append(json.loads(conn.getresponse().read())["choices"][0]["message"]["content"])
        server_socks = list(srv._conns)
        # Nagle + delayed ACK stalls every small response by ~40 ms: the accepted socket must disable it.
        nodelay = [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in server_socks]
        conn.close()
    assert texts == [f"r{i}" for i in range(n)]
    assert len(server_socks) == 1, "all requests should have reused one keep-alive connection"
    assert all(nodelay)


def test_hang_then_client_timeout_and_fast_close() -> None:
    srv = ScriptedServer([hang(30), reply("after")]).start()
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        chat(srv, timeout=0.3)
    assert time.monotonic() - start < 30 / 2  # the client's timeout ended it, not the 30 s hang
    assert completion(srv)["choices"][0]["message"]["content"] == "after"

    hung = ScriptedServer([hang(60)]).start()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            chat(hung, timeout=30)
        except (http.client.RemoteDisconnected, ConnectionError) as e:
            outcome.append(e)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    hung.wait_for_requests(1, timeout=30)
    start = time.monotonic()
    hung.close()
    srv.close()
    assert time.monotonic() - start < 60 / 2  # close() ended the hang, it did not wait out its 60 s
    worker.join(timeout=30)
    assert not worker.is_alive() and len(outcome) == 1


def test_drip_sends_slowly_but_completely() -> None:
    with ScriptedServer([drip("hi", 0.001), drip("yo", 0.0002)]) as srv:
        start = time.monotonic()
        out = completion(srv)
        elapsed = time.monotonic() - start
        _, _, data = chat(srv, stream=True)
    assert out["choices"][0]["message"]["content"] == "hi"
    assert elapsed >= 0.001 * len(json.dumps(out)) * 0.9  # one byte per interval
    events = sse_events(data)
    assert events[-1] == "[DONE]" and rebuild_stream(events)["content"] == "yo"


def test_raw_step_and_steps_from_json() -> None:
    steps = steps_from_json(
        [
            {"kind": "reply", "text": "t", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]},
            {"kind": "ipython", "code": "1+1"},
            {"kind": "error", "status": 500, "retry_after": 1.5, "times": 2},
            {"kind": "hang", "seconds": 1},
            {"kind": "drip", "text": "x", "interval": 0.1},
            {"kind": "truncated"},
            {"kind": "raw", "status": 200, "body": "{broken"},
            {"text": "kind defaults to reply"},
        ]
    )
    assert [s.kind for s in steps] == ["reply", "reply", "error", "hang", "drip", "truncated", "raw", "reply"]
    assert steps[0] == reply("t", [tool_call("f", {"a": 1})])
    assert steps[1] == ipython("1+1")
    assert steps[2] == error(500, retry_after=1.5, times=2)
    with pytest.raises(ValueError, match="unknown step kind"):
        steps_from_json([{"kind": "nope"}])
    with pytest.raises(ValueError, match="bad error step"):
        steps_from_json([{"kind": "error", "stauts": 500}])

    with ScriptedServer([raw(200, b"{broken", {"X-Test": "1"}), steps[6]]) as srv:
        results = [chat(srv), chat(srv)]
    for status, _, data in results:
        assert status == 200 and data == b"{broken"
    assert results[0][1]["x-test"] == "1"


def test_serve_cli(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "ipython", "code": "print('cli')"}, {"text": "done"}]))
    record = tmp_path / "requests.jsonl"
    src = str(Path(testing.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "prime_ci.testing", "serve", "--script", str(script)]
    cmd += ["--record", str(record), "--strict", "--context-window", "4096", "--auto-cache", "--min-cache-tokens", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
        host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("POST", "/v1/chat/completions", json.dumps({"model": "m", "messages": MESSAGES}))
        out = json.loads(conn.getresponse().read())
        conn.close()
        args = json.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
        assert args == {"code": "print('cli')"}
        assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        conn.request("GET", "/v1/models")
        assert json.loads(conn.getresponse().read())["data"][0]["meta"]["n_ctx"] == 4096
        null = [*MESSAGES, {"role": "assistant", "content": None}]
        conn.request("POST", "/v1/chat/completions", json.dumps({"model": "m", "messages": null}))
        strict = conn.getresponse()
        strict.read()
        conn.close()
        assert strict.status == 500
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["step_kind"], r["api"]) for r in rows] == [("reply", "openai"), ("models", "openai"),
                                                           ("rejected", "openai")]
    assert rows[0]["body"]["messages"] == MESSAGES and rows[0]["rejected"] is None
    assert "Failed to apply chat template" in rows[2]["rejected"]


def test_lifecycle_errors() -> None:
    srv = ScriptedServer()
    with pytest.raises(RuntimeError):
        _ = srv.url
    srv.start()
    srv.close()
    srv.close()  # idempotent
    with pytest.raises(RuntimeError):
        srv.start()
    with pytest.raises(ValueError):
        error(500, times=0)


def models(srv: ScriptedServer) -> list[dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        conn.request("GET", "/v1/models")
        data: list[dict[str, Any]] = json.loads(conn.getresponse().read())["data"]
        return data
    finally:
        conn.close()


def test_reasoning_content_and_nested_usage() -> None:
    thought = "step by step, " * 3
    nested: testing.UsageSpec = {"prompt_tokens_details": {"cached_tokens": 5}, "completion_tokens": 3,
                                 "input_tokens": 9}
    steps = [reply("ok", reasoning=thought), reply("ok", reasoning=thought), reply("x", usage=nested)]
    with ScriptedServer(steps) as srv:
        plain = completion(srv)
        _, _, data = chat(srv, stream=True)
        scripted = completion(srv)
    assert plain["choices"][0]["message"] == {"role": "assistant", "content": "ok", "reasoning_content": thought}
    thinking = math.ceil(len(thought) / 4)
    assert plain["usage"]["completion_tokens_details"] == {"reasoning_tokens": thinking}
    assert plain["usage"]["completion_tokens"] == 1 + thinking
    chunks = [json.loads(e) for e in sse_events(data)[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == thought
    assert sum(1 for d in deltas if "reasoning_content" in d) > 1
    assert rebuild_stream(sse_events(data))["usage"] == plain["usage"]
    prompt = math.ceil(len(json.dumps(MESSAGES) + "[]") / 4)
    assert scripted["usage"] == {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3,
                                 "prompt_tokens_details": {"cached_tokens": 5}}  # Anthropic keys left out
    assert steps_from_json([{"text": "t", "reasoning": "r"}]) == [reply("t", reasoning="r")]


def test_auto_cache_reports_the_shared_prefix() -> None:
    system = {"role": "system", "content": "z" * 6000}
    first, second = [system, {"role": "user", "content": "one"}], [system, {"role": "user", "content": "two"}]

    def canon(messages: list[dict[str, Any]]) -> str:
        return "[]" + "".join(json.dumps(m, sort_keys=True) for m in messages)

    with ScriptedServer(default=reply("ok"), auto_cache=True) as srv:
        cold, warm, repeat = (completion(srv, {"model": "m", "messages": m})["usage"] for m in (first, second, second))
        other_model = completion(srv, {"model": "other", "messages": second})["usage"]
        short = [completion(srv, {"model": "m", "messages": MESSAGES})["usage"] for _ in range(2)]
    a, b = canon(first), canon(second)
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert cold["prompt_tokens_details"] == {"cached_tokens": 0}
    assert warm["prompt_tokens_details"]["cached_tokens"] == shared // 4 // 128 * 128 >= 1024
    assert repeat["prompt_tokens_details"]["cached_tokens"] == len(canon(second)) // 4 // 128 * 128
    assert repeat["prompt_tokens"] == warm["prompt_tokens"] > repeat["prompt_tokens_details"]["cached_tokens"]
    assert other_model["prompt_tokens_details"]["cached_tokens"] == 0
    assert short[1]["prompt_tokens_details"]["cached_tokens"] == 0  # below min_cache_tokens (1024)
    medium = [{"role": "system", "content": "m" * 700}, MESSAGES[1]]
    with ScriptedServer(default=reply("ok"), auto_cache=True, min_cache_tokens=0) as srv:
        usages = [completion(srv, {"messages": medium})["usage"] for _ in range(2)]
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usages] == [0, 128]


def test_strict_mode_rejects_what_local_servers_reject() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    result = {"role": "tool", "tool_call_id": "c1", "content": "ok"}

    def history(assistant: dict[str, Any], tool: dict[str, Any] = result) -> dict[str, Any]:
        return {"model": "m", "messages": [MESSAGES[1], {"role": "assistant", **assistant}, tool]}

    bad_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    bodies = [
        history({"content": None, "tool_calls": [call]}),
        history({"tool_calls": [call]}),
        history({"content": "", "tool_calls": [bad_call]}),
        history({"content": "", "tool_calls": [call]}, {"role": "tool", "content": "ok"}),
        history({"content": "", "tool_calls": [call]}),
    ]
    with ScriptedServer([reply("first"), reply("second")], strict=True) as srv:
        results = [chat(srv, body) for body in bodies]
        assert srv.pending == 1  # only the accepted request consumed a step
        recorded = srv.wait_for_requests(5, chat=True)
    with ScriptedServer([reply("lenient")]) as lenient:
        assert completion(lenient, bodies[0])["choices"][0]["message"]["content"] == "lenient"
    statuses = [status for status, _, _ in results]
    assert statuses == [500, 500, 400, 400, 200]
    errors = [json.loads(data)["error"] for _, _, data in results[:4]]
    assert errors[0]["code"] == 500 and errors[0]["type"] == "server_error"
    assert '"content": null' in errors[0]["message"]
    assert errors[1]["message"].startswith("Failed to parse messages: Expected 'content'")
    assert errors[2]["code"] == 400 and "arguments: Input should be a valid string" in errors[2]["message"]
    assert "tool_call_id" in errors[3]["message"]
    assert json.loads(results[4][2])["choices"][0]["message"]["content"] == "first"
    assert [r.step_kind for r in recorded] == ["rejected"] * 4 + ["reply"]
    assert [r.rejected for r in srv.rejected] == [e["message"] for e in errors]


def test_context_window_models_metadata_and_400() -> None:
    prompt = math.ceil(len(json.dumps(MESSAGES) + "[]") / 4)
    long = [{"role": "user", "content": "w" * 600}]
    with ScriptedServer([reply("fits")], context_window=100) as srv:
        listed = models(srv)
        over = chat(srv, max_tokens=100)
        over_new = chat(srv, max_completion_tokens=90, max_tokens=1)
        long_prompt = chat(srv, {"model": "m", "messages": long})
        fits = completion(srv, max_tokens=100 - prompt)
        assert srv.pending == 0 and len(srv.rejected) == 3
    with ScriptedServer() as plain:
        assert "max_model_len" not in models(plain)[0] and "meta" not in models(plain)[0]
    assert all(m["max_model_len"] == 100 and "meta" not in m for m in listed)  # vLLM's
    with ScriptedServer(strict=True, context_window=100) as llama:  # llama.cpp's: n_ctx, not the trained window
        assert all("max_model_len" not in m and m["meta"] == {"n_ctx_train": 400, "n_ctx": 100} for m in models(llama))
    assert over[0] == 400 and json.loads(over[2]) == {"error": {
        "message": f"This model's maximum context length is 100 tokens. However, you requested {prompt + 100} tokens "
                   f"({prompt} in the messages, 100 in the completion). Please reduce the length of the messages or "
                   "completion.", "type": "BadRequestError", "param": None, "code": 400}}
    assert f"({prompt} in the messages, 90 in the completion)" in json.loads(over_new[2])["error"]["message"]
    long_tokens = math.ceil(len(json.dumps(long) + "[]") / 4)
    assert f"({long_tokens} in the messages, 0 in the completion)" in json.loads(long_prompt[2])["error"]["message"]
    assert fits["choices"][0]["message"]["content"] == "fits"
    assert [r.step_kind for r in srv.chat_requests] == ["rejected"] * 3 + ["reply"]
