"""The HTTP side of the scripted provider: request recording, handlers, SSE streaming."""

from __future__ import annotations

import json
import math
import socket
import socketserver
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prime_ci.testing.steps import Body, Drip, Error, Hang, Headers, Raw, Reply, Step, reply


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Body
    raw: bytes
    t: float  # time.monotonic() when the request was received
    step_kind: str  # a Step kind, or "models", "not_found", "bad_request"
    exhausted: bool = False  # answered with the default step


class Owner(Protocol):
    """What the handlers need of ``prime_ci.testing.ScriptedServer`` (a protocol: no import cycle)."""

    _closing: threading.Event

    def _track(self, conn: socket.socket, add: bool) -> None: ...

    def _record(self, request: RecordedRequest) -> None: ...

    def _dispatch(self, request: RecordedRequest) -> tuple[Step, int]: ...

    def _completion(self, step: Reply, body: Body, n: int) -> Body: ...


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

    def __init__(self, address: tuple[str, int], owner: Owner) -> None:
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
