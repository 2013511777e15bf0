"""A scripted OpenAI-compatible chat-completions server for tests.

    with ScriptedServer([ipython("print(1)"), reply("done")]) as srv:
        run_agent(api_base=srv.url)
        assert len(srv.chat_requests) == 2

Each chat request consumes one step of the script. Recorded header names are lower-cased.
CLI: ``python -m prime_ci.testing serve --script steps.json [--port N] [--record out.jsonl]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import socket
import socketserver
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from prime_ci.testing_steps import (
    Body,
    Drip,
    Error,
    Hang,
    Headers,
    Predicate,
    Raw,
    Reply,
    Script,
    Step,
    ToolCall,
    Truncated,
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

__all__ = ["Drip", "Error", "Hang", "Raw", "RecordedRequest", "Reply", "ScriptedServer", "Step", "ToolCall",
           "Truncated", "contains", "drip", "error", "hang", "ipython", "raw", "reply", "steps_from_json",
           "tool_call", "truncated"]

@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Body
    raw: bytes
    t: float  # time.monotonic() when the request was received
    step_kind: str  # a Step kind, or "models", "not_found", "bad_request"
    exhausted: bool = False  # answered with the default step


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error"}
_ERROR_CODES = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}
_MODELS = ("scripted-model", "gpt-4o-mini")


def _error_body(status: int, message: str) -> bytes:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = _ERROR_CODES.get(status)
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def _pieces(s: str, k: int) -> list[str]:
    size = max(1, math.ceil(len(s) / k))
    return [s[i : i + size] for i in range(0, len(s), size)]


def _stream_events(completion: Body) -> list[bytes]:
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: Body, finish: str | None = None) -> Body:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    content = message["content"]
    chunks = [chunk({"role": "assistant", "content": None if content is None else ""})]
    chunks += [chunk({"content": piece}) for piece in _pieces(content or "", 3)]
    for i, call in enumerate(message.get("tool_calls", [])):
        fn = call["function"]
        head = {"index": i, "id": call["id"], "type": "function"}
        chunks.append(chunk({"tool_calls": [head | {"function": {"name": fn["name"], "arguments": ""}}]}))
        for piece in _pieces(fn["arguments"], 2):
            chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], owner: ScriptedServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), which can block on reverse DNS for seconds.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        # Without TCP_NODELAY, headers and body go out in separate segments and delayed ACK stalls ~40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()
        self.server.owner._track(self.request, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.request, False)

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(
        self, parts: list[bytes], stream: bool = False, *, status: int = 200, headers: Headers = (),
        interval: float = 0.0, length: int = 0, complete: bool = True,
    ) -> None:
        """Send chunked SSE, or a body with Content-Length `length` (default: the real length).

        Each part is one write (one HTTP chunk when streaming), preceded by a pause of `interval`.
        An incomplete response ends by closing the connection, without the terminating chunk.
        """
        self.send_response(status)
        names = {k.lower() for k, _ in headers}
        if stream:
            headers = [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"), *headers]
        else:
            if "content-type" not in names:
                self.send_header("Content-Type", "application/json")
            if "content-length" not in names:
                self.send_header("Content-Length", str(length or sum(map(len, parts))))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        for part in parts:
            if interval > 0 and self.server.owner._closing.wait(interval):
                complete = False
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if stream else part)
        if not complete:
            self.close_connection = True
        elif stream:
            self.wfile.write(b"0\r\n\r\n")

    def _record(self, path: str, data: bytes, kind: str, t: float) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.owner._record(RecordedRequest(path, headers, {}, data, t, kind))

    def do_GET(self) -> None:
        path, t = self.path.split("?")[0], time.monotonic()
        if path in ("/v1/models", "/models"):
            self._record(path, b"", "models", t)
            models = [{"id": m, "object": "model", "created": 0, "owned_by": "prime-ci"} for m in _MODELS]
            self._send([json.dumps({"object": "list", "data": models}).encode()])
        else:
            self._record(path, b"", "not_found", t)
            self._send([_error_body(404, f"no route for GET {path}")], status=404)

    def do_POST(self) -> None:
        path, t = self.path.split("?")[0], time.monotonic()
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._record(path, data, "not_found", t)
            self._send([_error_body(404, f"no route for POST {path}")], status=404)
            return
        try:
            body = json.loads(data)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._record(path, data, "bad_request", t)
            self._send([_error_body(400, "request body is not a JSON object")], status=400)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        step, n = self.server.owner._dispatch(RecordedRequest(path, headers, body, data, t, ""))
        self._run(step, body, n)

    def _run(self, step: Step, body: Body, n: int) -> None:
        closing = self.server.owner._closing
        stream = body.get("stream") is True
        if isinstance(step, Error):
            extra = [] if step.retry_after is None else [("Retry-After", f"{step.retry_after:g}")]
            self._send([_error_body(step.status, step.message)], status=step.status, headers=extra)
        elif isinstance(step, Raw):
            self._send([step.body], status=step.status, headers=list((step.headers or {}).items()))
        elif isinstance(step, Hang):
            closing.wait(step.seconds)
            self.close_connection = True
        elif isinstance(step, Reply) and step.delay > 0 and closing.wait(step.delay):
            self.close_connection = True
        else:
            as_reply = step if isinstance(step, Reply) else reply(step.text)
            completion = self.server.owner._completion(as_reply, body, n)
            parts = _stream_events(completion) if stream else [json.dumps(completion).encode()]
            if isinstance(step, Reply):
                self._send(parts, stream)
            elif isinstance(step, Drip):
                data = b"".join(parts)
                self._send([data[i : i + 1] for i in range(len(data))], stream, interval=step.interval)
            elif stream:
                self._send(parts[:2], stream, complete=False)
            else:
                self._send([parts[0][: len(parts[0]) // 2]], length=len(parts[0]), complete=False)


class ScriptedServer:
    """Scripted OpenAI-compatible server on 127.0.0.1; `url` is the base URL for OpenAI clients.

    `script` is a list of steps consumed one per chat request, or a callable mapping the request body
    to a step (None counts as exhausted). Routes added with `route()` are consulted first: the first
    matching route that still has steps answers; if only exhausted routes match, `default` answers.
    `usage_scale` multiplies computed (not scripted) prompt_tokens.
    """

    def __init__(
        self, script: Script | None = None, *, default: Step | None = None, usage_scale: float = 1.0,
        host: str = "127.0.0.1", port: int = 0,
    ) -> None:
        self._lock = threading.RLock()  # reentrant: a script callable may read srv.requests
        self._cond = threading.Condition(self._lock)
        self._closing = threading.Event()
        self._script_fn = None if script is None or isinstance(script, Sequence) else script
        self._queue: deque[Step] = deque(script if isinstance(script, Sequence) else ())
        self._routes: list[tuple[Predicate, deque[Step]]] = []
        self._requests: list[RecordedRequest] = []
        self._conns: set[socket.socket] = set()
        self._count = 0
        self._host, self._port = host, port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.default: Step = default if default is not None else reply("(script exhausted)")
        self.usage_scale = usage_scale
        self.exhausted = 0

    def start(self) -> ScriptedServer:
        if self._closing.is_set():
            raise RuntimeError("ScriptedServer cannot be restarted after close()")
        if self._httpd is None:
            self._httpd = _HTTPServer((self._host, self._port), self)
            self._port = int(self._httpd.server_address[1])
            serve = self._httpd.serve_forever
            self._thread = threading.Thread(target=serve, args=(0.05,), name="scripted-server", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        self._closing.set()  # wakes handlers in hang/delay/drip waits
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # unblock handler threads waiting on keep-alive reads
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._thread is None:
            raise RuntimeError("ScriptedServer is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        kinds = ("models", "not_found", "bad_request")
        return [r for r in self.requests if r.step_kind not in kinds]

    @property
    def pending(self) -> int:
        """Steps not yet consumed, over the main queue and all routes."""
        with self._lock:
            return len(self._queue) + sum(len(q) for _, q in self._routes)

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `n` requests (of any endpoint) were recorded; return them all."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"got {len(self._requests)} requests, wanted {n} within {timeout}s")
            return list(self._requests)

    def add(self, *steps: Step) -> None:
        """Append steps to the main queue."""
        with self._lock:
            self._queue.extend(steps)

    def route(self, predicate: Predicate, steps: Sequence[Step]) -> None:
        with self._lock:
            self._routes.append((predicate, deque(steps)))

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def _record(self, request: RecordedRequest) -> None:
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()

    @staticmethod
    def _pop(queue: deque[Step]) -> Step:
        step = queue.popleft()
        if isinstance(step, Error) and step.times > 1:
            queue.appendleft(replace(step, times=step.times - 1))
        return step

    def _dispatch(self, request: RecordedRequest) -> tuple[Step, int]:
        # Step selection and recording share one lock hold so the record order matches consumption.
        with self._cond:
            step: Step | None = None
            matched = False
            for predicate, queue in self._routes:
                if predicate(request.body):
                    matched = True
                    if queue:
                        step = self._pop(queue)
                        break
            if not matched:
                if self._script_fn is not None:
                    step = self._script_fn(request.body)
                elif self._queue:
                    step = self._pop(self._queue)
            if step is None:
                self.exhausted += 1
                step, request.exhausted = self.default, True
            request.step_kind = step.kind
            self._count += 1
            self._record(request)
            return step, self._count

    def _completion(self, step: Reply, body: Body, n: int) -> Body:
        calls: list[Body] = []
        for i, c in enumerate(step.tool_calls):
            fn = {"name": c.name, "arguments": c.arguments}
            calls.append({"id": c.id or f"call_{n}_{i}", "type": "function", "function": fn})
        content = step.text if step.text is not None else (None if calls else "")
        prompt = len(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", [])))
        produced = len(content or "") + sum(len(c.name) + len(c.arguments) for c in step.tool_calls)
        usage = {
            "prompt_tokens": round(math.ceil(prompt / 4) * self.usage_scale),
            "completion_tokens": max(1, math.ceil(produced / 4)),
        }
        usage.update(step.usage or {})
        finish = step.finish_reason or ("tool_calls" if calls else "stop")
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        capped = isinstance(limit, int) and usage["completion_tokens"] > limit
        if isinstance(limit, int) and capped:
            usage["completion_tokens"] = limit
            finish = step.finish_reason or "length"
        if capped or "total_tokens" not in (step.usage or {}):
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        message: Body = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        return {"id": f"chatcmpl-scripted-{n}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", _MODELS[0]), "choices": [choice], "usage": usage}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prime_ci.testing", description="Scripted OpenAI server.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a JSON script until SIGTERM/SIGINT; print the base URL")
    serve.add_argument("--script", type=Path, help="JSON list of steps (default: empty script)")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--usage-scale", type=float, default=1.0)
    serve.add_argument("--record", type=Path, help="write recorded requests as JSONL here on exit")
    args = parser.parse_args(argv)

    steps = steps_from_json(json.loads(args.script.read_text())) if args.script else []
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with ScriptedServer(steps, port=args.port, usage_scale=args.usage_scale) as srv:
        print(srv.url, flush=True)
        try:
            while not stop.wait(0.2):
                pass
        finally:
            if args.record is not None:
                keys = ("path", "headers", "body", "t", "step_kind", "exhausted")
                with args.record.open("w") as f:
                    for r in srv.requests:
                        f.write(json.dumps({k: getattr(r, k) for k in keys}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
