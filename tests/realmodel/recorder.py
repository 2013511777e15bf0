"""A loopback pass-through in front of the real server that keeps every exchange (request and response bodies,
status): the server's own usage counts per request, and the exact bodies to show when a run goes wrong."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Exchange:
    method: str
    path: str
    request: bytes
    status: int
    response: bytes

    def request_json(self) -> Any:
        return json.loads(self.request) if self.request else None

    def response_json(self) -> Any:
        return json.loads(self.response)

    def show(self, limit: int = 4000) -> str:
        return (f"{self.method} {self.path} -> {self.status}\n  request: {self.request[-limit:]!r}\n"
                f"  response: {self.response[:limit]!r}")


class Recorder:
    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        # changes a chat request's body before the server sees it (what is recorded is what the server saw)
        self.rewrite: Callable[[bytes], bytes] | None = None
        self.exchanges: list[Exchange] = []
        self.lock = threading.Lock()

    def completions(self) -> list[Exchange]:
        with self.lock:
            return [e for e in self.exchanges if e.path.endswith("/chat/completions")]

    def forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
        if self.rewrite is not None and path.endswith("/chat/completions"):
            body = self.rewrite(body)
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=600)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            kind = response.getheader("Content-Type", "application/json")
        finally:
            conn.close()
        with self.lock:
            self.exchanges.append(Exchange(method, path, body, response.status, data))
        return response.status, data, kind


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            status, data, kind = recorder.forward(self.command, self.path, body, headers)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _relay

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def recording(upstream: str) -> Iterator[tuple[str, Recorder]]:
    """(the recorder's own base URL on loopback, the recorder) for as long as the block runs."""
    recorder = Recorder(upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
