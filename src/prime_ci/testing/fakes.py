"""In-process seams for the agent loop: a scripted ``Model`` and a fake kernel (an ``Executor``).

They let a test drive ``prime_ci.loop.agent.Agent``, the budget, the judge, the compactor and resume's
state rebuild in milliseconds, without a kernel process or an HTTP server::

    model = ScriptedModel([tool_reply("x = 1"), text_reply("done")])
    kernel = FakeExecutor([cell("ok")])
    agent = Agent(model, kernel, budget, log, turn_end, cell_timeout=60)
    stop = await agent.run()
    assert kernel.cells == ["x = 1"] and model.calls[1].messages[-1]["role"] == "tool"

A script step is a value (a ``ModelReply``, a ``CellResult`` or a ``str``) or a callable that gets the call
(``ModelCall``) or the cell's code and returns one, or an awaitable of one: a step can block until the test
releases it, or look at the world (the session log on disk) at the moment of the call.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from prime_ci.kernel.client import CellResult
from prime_ci.model.protocol import ModelReply, ToolCall
from prime_ci.model.usage import Cost, Usage

__all__ = ["CellStep", "FakeExecutor", "ModelCall", "ModelStep", "ScriptedModel", "cell", "raw_tool_reply",
           "text_reply", "tool_reply"]


@dataclass
class ModelCall:
    """One ``complete()`` call as the loop made it; ``messages`` is a deep copy taken at the call."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    timeout: float
    index: int  # 0-based position among the model's calls


ModelStep = ModelReply | Callable[[ModelCall], ModelReply | Awaitable[ModelReply]]
CellStep = CellResult | str | Callable[[str], CellResult | str | Awaitable[CellResult | str]]

_ids = iter(range(1, 1 << 62))


def tool_reply(code: str, *, text: str = "", prompt_tokens: int = 0, completion_tokens: int = 0,
               call_id: str | None = None, name: str = "ipython") -> ModelReply:
    """An assistant turn calling ``ipython`` with ``code``; zero usage is filled in by ``ScriptedModel``."""
    call = ToolCall(call_id or f"call_{next(_ids)}", name, json.dumps({"code": code}))
    return ModelReply(text, [call], Usage(prompt_tokens, completion_tokens), None, "tool_calls", "scripted/model")


def raw_tool_reply(arguments: str, *, name: str = "ipython", extra: int = 0) -> ModelReply:
    """A tool call with verbatim (possibly malformed) arguments, plus ``extra`` well-formed calls."""
    calls = [ToolCall(f"call_{next(_ids)}", name, arguments)]
    calls += [ToolCall(f"call_{next(_ids)}", "ipython", json.dumps({"code": "pass"})) for _ in range(extra)]
    return ModelReply("", calls, Usage(), None, "tool_calls", "scripted/model")


def text_reply(text: str, *, prompt_tokens: int = 0, completion_tokens: int = 0) -> ModelReply:
    """An assistant turn without a tool call: the model ends its turn."""
    return ModelReply(text, [], Usage(prompt_tokens, completion_tokens), None, "stop", "scripted/model")


def cell(text: str = "", status: str = "ok", *, duration_s: float = 0.0, error: str | None = None) -> CellResult:
    """A kernel cell's result as the loop sees it."""
    return CellResult(text=text, status=status, duration_s=duration_s, chars=len(text), error=error,
                      outputs=[{"output_type": "stream", "name": "stdout", "text": text}] if text else [])


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ScriptedModel:
    """Implements the ``Model`` protocol from a script; records every call in ``calls``.

    Usage left at zero in a scripted reply is computed like the scripted server does: prompt tokens
    ``ceil(chars / 4)`` of the messages and tools as JSON, completion tokens ``ceil(chars / 4)`` of what the
    reply says. As a provider would, the completion is clamped to the call's ``max_tokens`` (finish reason
    ``length``): a reply with a huge ``completion_tokens`` spends everything the loop allowed it.
    ``on_call`` runs at every call before its step (e.g. to check what the session log holds on disk).
    """

    def __init__(self, script: Sequence[ModelStep] | Callable[[ModelCall], ModelStep | None] = (), *,
                 name: str = "scripted/model", default: ModelReply | None = None,
                 on_call: Callable[[ModelCall], None] | None = None, cost_usd: float | None = None) -> None:
        self.name = name
        self._fn = None if isinstance(script, Sequence) else script
        self._queue: deque[ModelStep] = deque(script if isinstance(script, Sequence) else ())
        self.default = default if default is not None else text_reply("(script exhausted)")
        self.on_call = on_call
        self.cost_usd = cost_usd
        self.calls: list[ModelCall] = []
        self.exhausted = 0

    def add(self, *steps: ModelStep) -> None:
        self._queue.extend(steps)

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply:
        call = ModelCall(copy.deepcopy(messages), copy.deepcopy(tools), max_tokens, timeout, len(self.calls))
        self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        step: ModelStep | None = self._fn(call) if self._fn is not None else (
            self._queue.popleft() if self._queue else None)
        if step is None:
            self.exhausted += 1
            step = self.default
        reply = step if isinstance(step, ModelReply) else await _resolve(step(call))
        assert isinstance(reply, ModelReply), f"a model step returned {reply!r}"
        return self._settle(reply, call)

    def _settle(self, reply: ModelReply, call: ModelCall) -> ModelReply:
        usage = reply.usage
        if usage.total_tokens == 0:
            prompt = len(json.dumps(call.messages)) + len(json.dumps(call.tools))
            produced = len(reply.text) + sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
            usage = Usage(math.ceil(prompt / 4), max(1, math.ceil(produced / 4)))
        finish = reply.finish_reason
        if usage.completion_tokens > call.max_tokens:
            usage, finish = Usage(usage.prompt_tokens, call.max_tokens), "length"
        return replace(reply, usage=usage, finish_reason=finish, model=self.name, errors=[],
                       tool_calls=list(reply.tool_calls),
                       cost=reply.cost if reply.cost is not None else (
                           None if self.cost_usd is None else Cost(input=self.cost_usd)))


@dataclass
class FakeExecutor:
    """A kernel stand-in for the loop (the ``Executor`` protocol): scripted results, recorded cells.

    A ``str`` step is an ``ok`` cell printing that text. ``names`` is what ``user_names()`` reports (the
    compactor's reminder of the kernel's variables).
    """

    script: Sequence[CellStep] | Callable[[str], CellStep] = ()
    default: CellStep = field(default_factory=cell)
    names: list[str] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)
    timeouts: list[float] = field(default_factory=list)
    _queue: deque[CellStep] = field(init=False)

    def __post_init__(self) -> None:
        self._queue = deque(self.script if isinstance(self.script, Sequence) else ())

    def add(self, *steps: CellStep) -> None:
        self._queue.extend(steps)

    async def execute(self, code: str, *, timeout: float) -> CellResult:
        self.cells.append(code)
        self.timeouts.append(timeout)
        step: CellStep
        if not isinstance(self.script, Sequence):
            step = self.script(code)
        else:
            step = self._queue.popleft() if self._queue else self.default
        result = await _resolve(step(code)) if callable(step) else step
        if isinstance(result, str):
            result = cell(result)
        assert isinstance(result, CellResult), f"a cell step returned {result!r}"
        return result

    async def user_names(self) -> list[str]:
        return list(self.names)


if TYPE_CHECKING:  # mypy checks that the fakes satisfy the protocols the loop takes
    from prime_ci.loop.agent import Executor
    from prime_ci.model.protocol import Model

    def _conforms(model: ScriptedModel, kernel: FakeExecutor) -> tuple[Model, Executor]:
        return model, kernel
