"""A scripted OpenAI-compatible and Anthropic Messages server for tests.

    with ScriptedServer([ipython("print(1)"), reply("done")]) as srv:
        run_agent(api_base=srv.url)
        assert len(srv.chat_requests) == 2

Each chat request consumes one step of the script. Recorded header names are lower-cased.
CLI: ``python -m prime_ci.testing serve --script steps.json [--port N] [--record out.jsonl] [--strict]
[--context-window N] [--auto-cache] [--min-cache-tokens N]``.

In-process seams (no server, no kernel): ``ScriptedModel`` (the ``Model`` protocol) and ``FakeExecutor`` (the
agent loop's kernel), in ``prime_ci.testing.fakes`` and importable from here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from prime_ci.testing import anthropic_api, llama_api, openai_api
from prime_ci.testing.cache import BreakpointCache, PrefixCache, tokens
from prime_ci.testing.http_server import RecordedRequest, _HTTPServer
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
    UsageSpec,
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
           "ScriptedServer", "Step", "ToolCall", "Truncated", "UsageSpec", "cell", "contains", "drip", "error", "hang",
           "ipython", "raw", "raw_tool_reply", "reply", "steps_from_json", "text_reply", "tool_call", "tool_reply",
           "truncated"]
_NOT_CHAT = ("models", "tokenize", "apply-template", "not_found", "bad_request")
_FAKES = frozenset({"FakeExecutor", "ModelCall", "ScriptedModel", "cell", "raw_tool_reply", "text_reply", "tool_reply"})


def __getattr__(name: str) -> Any:
    """The in-process fakes import the kernel client (zmq): loaded on first use, not by ``serve``."""
    if name in _FAKES:
        from prime_ci.testing import fakes

        return getattr(fakes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ScriptedServer:
    """Scripted provider on 127.0.0.1 speaking OpenAI chat completions and the Anthropic Messages API.

    api_base: `url` (``http://127.0.0.1:PORT/v1``) for OpenAI clients and litellm ``openai/...``;
    `root_url` (``http://127.0.0.1:PORT``) for litellm's ``anthropic/...`` route, which appends
    ``/v1/messages`` itself (given `url` it would post to ``/v1/v1/messages``: a 404 saying so).

    `script` is a list of steps consumed one per chat or Messages request (the same steps answer both
    APIs), or a callable mapping the request body to a step (None counts as exhausted). Routes added with
    `route()` are consulted first: the first matching route that still has steps answers; if only
    exhausted routes match, `default` answers. `usage_scale` multiplies computed (not scripted) prompt tokens.

    On the Messages API a reply is a thinking block (`reasoning`, with a signature), a text block (when
    the text is non-empty) and a tool_use block per call. Tool arguments that are not a JSON object
    get a 500 api_error unless streaming, which sends them verbatim as input_json_delta. Scripted
    usage keys of one API are ignored by the other, except that `prompt_tokens` / `completion_tokens`
    stand in for `input_tokens` / `output_tokens` on the Messages API.

    Prompt caching, simulated deterministically (see ``prime_ci.testing.cache``); `clear_cache()` forgets it:
    - Messages API, always: a block with ``cache_control`` is a breakpoint (more than 4: 400). Its prefix
      over tools, system and message blocks is looked up (there and up to 20 blocks back), then written;
      usage splits into input_tokens, cache_read_input_tokens and cache_creation_input_tokens.
    - `auto_cache`: OpenAI-style automatic caching, ``usage.prompt_tokens_details.cached_tokens`` = the
      longest prefix shared with an earlier request, in multiples of 128 (prompt_tokens still counts it).
    - `min_cache_tokens`: shorter prefixes are not cached; None means 0 (Messages) or 1024 (auto_cache).

    `strict` rejects, on the OpenAI path, what local servers do: an assistant message with null or no
    ``content`` or with tool-call arguments that are not JSON, empty ones included (500, as llama.cpp /
    llama-cpp-python), a tool message without ``tool_call_id`` or tool-call arguments that are not a string
    (400). `context_window` adds the window to /v1/models, as vLLM's ``max_model_len`` or, with `strict`,
    as llama.cpp's ``meta.n_ctx`` (beside a larger ``meta.n_ctx_train``: one name each, so a client reading
    the wrong one is caught), and answers 400 (vLLM's or Anthropic's wording) when the prompt plus the
    requested completion does not fit. A rejected request is recorded (step_kind "rejected", `rejected` =
    the message) and consumes no step, so a resend continues the script.

    With `strict` the server also answers llama.cpp's ``POST /tokenize`` and ``POST /apply-template`` (at the
    root, not under /v1; ``llama_api``), and counts a chat request's prompt as those two count it: the tokens of
    its rendering, BOS included. `apply_template` False: an older llama.cpp build without ``/apply-template``
    (404). These requests consume no step (step_kind "tokenize", "apply-template").
    """

    def __init__(
        self, script: Script | None = None, *, default: Step | None = None, usage_scale: float = 1.0,
        host: str = "127.0.0.1", port: int = 0, strict: bool = False, context_window: int | None = None,
        auto_cache: bool = False, min_cache_tokens: int | None = None, apply_template: bool = True,
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
        self._breakpoints = BreakpointCache(0 if min_cache_tokens is None else min_cache_tokens)
        self._prefixes = PrefixCache(1024 if min_cache_tokens is None else min_cache_tokens) if auto_cache else None
        self.default: Step = default if default is not None else reply("(script exhausted)")
        self.usage_scale = usage_scale
        self.strict = strict
        self.context_window = context_window
        self.apply_template = apply_template
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
    def root_url(self) -> str:
        """The api_base for litellm's anthropic/ route (it appends /v1/messages)."""
        return f"http://{self._host}:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.step_kind not in _NOT_CHAT]

    @property
    def rejected(self) -> list[RecordedRequest]:
        """Requests refused by `strict`, `context_window` or the Messages API's own checks."""
        return [r for r in self.requests if r.rejected is not None]

    def clear_cache(self) -> None:
        """Forget every cached prompt prefix (as when the provider's cache expires)."""
        with self._lock:
            self._breakpoints.clear()
            if self._prefixes is not None:
                self._prefixes.clear()

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

    def _check(self, request: RecordedRequest) -> tuple[int, bytes, str] | None:
        """Status, body and message of the rejection `request` gets, if any."""
        body = request.body
        if request.api == "anthropic":
            blocks = anthropic_api.prompt_blocks(body)
            total = tokens(sum(b.chars for b in blocks), self.usage_scale)
            problem = anthropic_api.request_problem(body, blocks, total, self.context_window)
            return None if problem is None else (400, anthropic_api.error_body(400, problem), problem)
        if self.strict and (found := openai_api.strict_problem(body)) is not None:
            status, message = found
            return status, openai_api.llama_error_body(status, message), message
        if self.context_window is not None:
            prompt = self._prompt_tokens(body)
            problem = openai_api.context_problem(body, prompt, self.context_window)
            if problem is not None:
                return 400, openai_api.vllm_error_body(problem), problem
        return None

    def _dispatch(self, request: RecordedRequest) -> tuple[Step, int]:
        # Step selection and recording share one lock hold so the record order matches consumption.
        with self._cond:
            self._count += 1
            rejection = self._check(request)
            if rejection is not None:
                status, payload, request.rejected = rejection
                request.step_kind = "rejected"
                self._record(request)
                return Raw(status, payload), self._count
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
            self._record(request)
            return step, self._count

    def _prompt_tokens(self, body: Body) -> int:
        """A chat request's prompt tokens: llama.cpp's count with `strict` (``llama_api``), else its JSON's."""
        if self.strict:
            return round(llama_api.prompt_tokens(body) * self.usage_scale)
        return tokens(openai_api.prompt_chars(body), self.usage_scale)

    def _reply_body(self, api: str, step: Reply, body: Body, n: int, stream: bool) -> Body:
        """The response to `step`: a Messages response for "anthropic", else a chat completion. Caches
        are read and written here, so only requests that got an answer are cached."""
        scope = str(body.get("model"))
        if api == "anthropic":
            blocks = anthropic_api.prompt_blocks(body)
            with self._lock:
                usage = self._breakpoints.account(scope, blocks, self.usage_scale)
            return anthropic_api.message(step, body, n, usage, stream=stream)
        cached = None
        if self._prefixes is not None:
            text = openai_api.prompt_text(body)
            with self._lock:
                cached = self._prefixes.account(scope, text, self.usage_scale)
        prompt = self._prompt_tokens(body)
        return openai_api.completion(step, body, n, prompt_tokens=prompt, cached_tokens=cached)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prime_ci.testing", description="Scripted provider server.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a JSON script until SIGTERM/SIGINT; print the base URL")
    serve.add_argument("--script", type=Path, help="JSON list of steps (default: empty script)")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--usage-scale", type=float, default=1.0)
    serve.add_argument("--record", type=Path, help="write recorded requests as JSONL here on exit")
    serve.add_argument("--strict", action="store_true", help="reject what llama.cpp / vLLM / Ollama reject")
    serve.add_argument("--context-window", type=int, help="context length in tokens, reported and enforced")
    serve.add_argument("--auto-cache", action="store_true", help="OpenAI-style automatic prompt caching")
    serve.add_argument("--min-cache-tokens", type=int, help="shortest cached prefix (default 0 / 1024)")
    args = parser.parse_args(argv)

    steps = steps_from_json(json.loads(args.script.read_text(encoding="utf-8"))) if args.script else []
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options = {"strict": args.strict, "context_window": args.context_window, "auto_cache": args.auto_cache,
               "min_cache_tokens": args.min_cache_tokens}
    with ScriptedServer(steps, port=args.port, usage_scale=args.usage_scale, **options) as srv:
        print(srv.url, flush=True)
        try:
            while not stop.wait(0.2):
                pass
        finally:
            if args.record is not None:
                keys = ("path", "api", "headers", "body", "t", "step_kind", "exhausted", "rejected")
                with args.record.open("w", encoding="utf-8") as f:
                    for r in srv.requests:
                        f.write(json.dumps({k: getattr(r, k) for k in keys}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
