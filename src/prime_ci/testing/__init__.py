"""A scripted OpenAI-compatible chat-completions server for tests.

    with ScriptedServer([ipython("print(1)"), reply("done")]) as srv:
        run_agent(api_base=srv.url)
        assert len(srv.chat_requests) == 2

Each chat request consumes one step of the script. Recorded header names are lower-cased.
CLI: ``python -m prime_ci.testing serve --script steps.json [--port N] [--record out.jsonl]``.

In-process seams (no server, no kernel): ``ScriptedModel`` (the ``Model`` protocol) and ``FakeExecutor`` (the
agent loop's kernel), in ``prime_ci.testing.fakes`` and importable from here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from prime_ci.testing.http_server import _MODELS, RecordedRequest, _HTTPServer
from prime_ci.testing.steps import (
    Body,
    Drip,
    Error,
    Hang,
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

if TYPE_CHECKING:
    from prime_ci.testing.fakes import (
        FakeExecutor,
        ModelCall,
        ScriptedModel,
        cell,
        raw_tool_reply,
        text_reply,
        tool_reply,
    )

__all__ = ["Drip", "Error", "FakeExecutor", "Hang", "ModelCall", "Raw", "RecordedRequest", "Reply", "ScriptedModel",
           "ScriptedServer", "Step", "ToolCall", "Truncated", "cell", "contains", "drip", "error", "hang", "ipython",
           "raw", "raw_tool_reply", "reply", "steps_from_json", "text_reply", "tool_call", "tool_reply", "truncated"]
_NOT_CHAT = ("models", "not_found", "bad_request")
_FAKES = frozenset({"FakeExecutor", "ModelCall", "ScriptedModel", "cell", "raw_tool_reply", "text_reply", "tool_reply"})


def __getattr__(name: str) -> Any:
    """The in-process fakes import the kernel client (zmq): loaded on first use, not by ``serve``."""
    if name in _FAKES:
        from prime_ci.testing import fakes

        return getattr(fakes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        return [r for r in self.requests if r.step_kind not in _NOT_CHAT]

    @property
    def pending(self) -> int:
        """Steps not yet consumed, over the main queue and all routes."""
        with self._lock:
            return len(self._queue) + sum(len(q) for _, q in self._routes)

    def wait_for_requests(self, n: int, timeout: float = 5.0, *, chat: bool = False) -> list[RecordedRequest]:
        """Block until at least `n` requests (of any endpoint; with `chat`, chat requests) were recorded;
        return them all (with `chat`, the chat requests)."""

        def seen() -> list[RecordedRequest]:
            return [r for r in self._requests if not chat or r.step_kind not in _NOT_CHAT]

        with self._cond:
            if not self._cond.wait_for(lambda: len(seen()) >= n, timeout):
                raise TimeoutError(f"got {len(seen())} requests, wanted {n} within {timeout}s")
            return seen()

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
