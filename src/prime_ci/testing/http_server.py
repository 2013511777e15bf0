"""The HTTP side of the scripted provider: request recording, routing by API, sending (SSE too)."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import prime_ci.testing.anthropic_api as anthropic_api
import prime_ci.testing.llama_api as llama_api
import prime_ci.testing.openai_api as openai_api
from prime_ci.testing.steps import Body, Drip, Error, Hang, Headers, Raw, Reply, Step, reply

# the paths the server answers POSTs on
ROUTES = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/messages", "/messages"})


def api_of(path: str) -> str:
    """"anthropic" for a Messages API path, else "openai"."""
    return "anthropic" if path.endswith("/messages") else "openai"


def json_object(data: bytes) -> dict[str, Any] | None:
    """A request body that is a JSON object, else None."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Body
    raw: bytes
    t: float  # time.monotonic() when the request was received
    step_kind: str  # a Step kind, or "models", "tokenize", "apply-template", "not_found", "bad_request", "rejected"
    exhausted: bool = False  # answered with the default step
    rejected: str | None = None  # why the server refused it (strict mode, context window, ...); no step consumed

    @property
    def api(self) -> str:
        """"anthropic" for the Messages API, else "openai"."""
        return api_of(self.path)


class Owner(Protocol):
    """What the handlers need of ``prime_ci.testing.ScriptedServer`` (a protocol: no import cycle)."""

    _closing: threading.Event
    context_window: int | None
    strict: bool
    apply_template: bool

    def _track(self, conn: socket.socket, add: bool) -> None: ...

    def _record(self, request: RecordedRequest) -> None: ...

    def _dispatch(self, request: RecordedRequest) -> tuple[Step, int]: ...

    def _reply_body(self, api: str, step: Reply, body: Body, n: int, stream: bool) -> Body: ...


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
            owner = self.server.owner
            self._send([openai_api.models_body(owner.context_window, llama=owner.strict)])
        else:
            self._record(path, b"", "not_found", t)
            self._send([openai_api.error_body(404, f"no route for GET {path}")], status=404)

    def do_POST(self) -> None:
        path, t = self.path.split("?")[0], time.monotonic()
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        owner = self.server.owner
        if owner.strict and (path == "/tokenize" or (path == "/apply-template" and owner.apply_template)):
            self._llama(path, data, t)
            return
        if path not in ROUTES:
            self._record(path, data, "not_found", t)
            hint = " (litellm's anthropic/ route appends /v1/messages: pass root_url as api_base)"
            message = f"no route for POST {path}" + (hint if api_of(path) == "anthropic" else "")
            self._send([openai_api.error_body(404, message)], status=404)
            return
        api = api_of(path)
        error_body = anthropic_api.error_body if api == "anthropic" else openai_api.error_body
        body = json_object(data)
        if body is None:
            self._record(path, data, "bad_request", t)
            self._send([error_body(400, "request body is not a JSON object")], status=400)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        step, n = self.server.owner._dispatch(RecordedRequest(path, headers, body, data, t, ""))
        self._run(api, step, body, n)

    def _llama(self, path: str, data: bytes, t: float) -> None:
        """llama.cpp's ``/tokenize`` and ``/apply-template`` (``llama_api``); errors in llama.cpp's shape."""
        body = json_object(data)
        if body is None:
            self._record(path, data, "bad_request", t)
            self._send([openai_api.llama_error_body(400, "request body is not a JSON object")], status=400)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.owner._record(RecordedRequest(path, headers, body, data, t, path.lstrip("/")))
        if path == "/tokenize":
            self._send([json.dumps(llama_api.tokenize_body(body)).encode()])
            return
        problem = llama_api.template_problem(body)
        status, message = (400, problem) if problem is not None else openai_api.strict_problem(body) or (200, "")
        if status != 200:
            self._send([openai_api.llama_error_body(status, message)], status=status)
            return
        self._send([json.dumps({"prompt": llama_api.render(body)}).encode()])

    def _run(self, api: str, step: Step, body: Body, n: int) -> None:
        closing = self.server.owner._closing
        stream = body.get("stream") is True
        error_body = anthropic_api.error_body if api == "anthropic" else openai_api.error_body
        if isinstance(step, Error):
            extra = [] if step.retry_after is None else [("Retry-After", f"{step.retry_after:g}")]
            self._send([error_body(step.status, step.message)], status=step.status, headers=extra)
            return
        if isinstance(step, Raw):
            self._send([step.body], status=step.status, headers=list((step.headers or {}).items()))
            return
        if isinstance(step, Hang):
            closing.wait(step.seconds)
            self.close_connection = True
            return
        if isinstance(step, Reply) and step.delay > 0 and closing.wait(step.delay):
            self.close_connection = True
            return
        as_reply = step if isinstance(step, Reply) else reply(step.text)
        try:
            payload = self.server.owner._reply_body(api, as_reply, body, n, stream)
        except anthropic_api.Inexpressible as e:
            self._send([error_body(500, str(e))], status=500)
            return
        if not stream:
            parts = [json.dumps(payload).encode()]
        elif api == "anthropic":
            parts = anthropic_api.stream_events(payload, [c.arguments for c in as_reply.tool_calls])
        else:
            parts = openai_api.stream_events(payload)
        if isinstance(step, Reply):
            self._send(parts, stream)
        elif isinstance(step, Drip):
            data = b"".join(parts)
            self._send([data[i : i + 1] for i in range(len(data))], stream, interval=step.interval)
        elif stream:
            self._send(parts[:2], stream, complete=False)
        else:
            self._send([parts[0][: len(parts[0]) // 2]], length=len(parts[0]), complete=False)
