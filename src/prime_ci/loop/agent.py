"""The agent loop: budget check -> model call -> one ipython cell -> bounded result -> ... -> gates."""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from prime_ci.activity import doing
from prime_ci.durations import format_duration
from prime_ci.errors import ContextOverflow
from prime_ci.isolation.untrusted import clean_terminal_text
from prime_ci.kernel.client import CellResult
from prime_ci.loop import console_detail
from prime_ci.loop.budget import BudgetExhausted, Meter
from prime_ci.loop.compact import Compactor
from prime_ci.loop.tool_call import args_for_log, parse_call, wire_arguments
from prime_ci.model.protocol import UNREADABLE, Model, ModelReply, ToolCall, endpoint
from prime_ci.model.usage import Cost, TokenRate, Usage, message_chars, session_usage
from prime_ci.session.log import SessionLog
from prime_ci.stops import Stop, StopReason

TOOL = {
    "type": "function",
    "function": {
        "name": "ipython",
        "description": (
            "Execute Python code in a persistent IPython kernel whose working directory is the repository. "
            "Variables persist between calls. `!cmd` and `%%bash` cells run shell commands. Returns "
            "stdout, stderr, the result and any traceback (long output is elided in the middle)."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The code to execute."}},
            "required": ["code"],
        },
    },
}
MAX_MALFORMED = 3
__all__ = ["TOOL", "Agent", "Conversation", "Executor", "Stop", "StopReason", "TurnEnd", "log_model", "split_model"]


def split_model(name: str) -> tuple[str, str]:
    """(provider, model id) of a litellm model name, as assistant messages and ``model_change`` carry them."""
    provider, _, model = name.partition("/")
    return provider, model or provider


def log_model(log: SessionLog, name: str) -> None:
    provider, model = split_model(name)
    log.append("model_change", provider=provider, modelId=model)


class Executor(Protocol):
    async def execute(self, code: str, *, timeout: float) -> CellResult: ...

    async def user_names(self) -> list[str]: ...


class TurnEnd(Protocol):
    """Decides what happens when the model ends its turn: None (done), or feedback to continue with."""

    async def __call__(self) -> Stop | str: ...


@dataclass
class Conversation:
    """The provider-format message list plus its running size, so nothing per turn walks the history.

    ``ids`` holds the session entry id of each message; ``record`` keeps every message ever added, also
    after a compaction replaced the older ones in ``messages`` (the kernel's ``history``). ``chars`` is the size
    of the messages and the tool list as JSON; ``tokens`` its estimate at ``rate``, the model's calibrated rate
    (``Budget.rate``).
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)
    record: list[dict[str, Any]] = field(default_factory=list)
    rate: TokenRate = field(default_factory=TokenRate)
    chars: int = field(default_factory=lambda: message_chars([TOOL]) + 2)  # and the brackets of the message list

    @property
    def tokens(self) -> int:
        return self.rate.tokens(self.chars)

    def add(self, message: dict[str, Any], entry: str | None = None) -> None:
        self.messages.append(message)
        self.ids.append(entry)
        self.record.append(message)
        self.chars += message_chars(message) + 2  # and its separator in the list

    def replace(self, messages: list[dict[str, Any]], ids: list[str | None]) -> None:
        self.messages, self.ids = messages, ids
        self.chars = message_chars([TOOL]) + 2 + sum(message_chars(m) + 2 for m in messages)


@dataclass
class Agent:
    model: Model
    kernel: Executor
    budget: Meter
    log: SessionLog
    turn_end: TurnEnd
    cell_timeout: float
    conversation: Conversation = field(default_factory=Conversation)
    on_cell: Callable[[str, CellResult], Awaitable[None]] | None = None
    progress: Callable[[str], None] | None = None
    detail: Callable[[str], None] | None = None  # -v: each reply's text, each cell's code and output's head
    inbox: Callable[[], list[tuple[str, str, dict[str, Any]]]] | None = None
    compactor: Compactor | None = None
    task: str = ""  # the task as given: every compaction summary starts with it
    last_assistant: str | None = None  # entry id of the latest assistant message
    compact_requested: bool = False
    compact_focus: str | None = None
    end_turn_requested: bool = False
    last_text: str = ""
    _malformed: int = 0
    _truncated: bool = False
    # assistant entry id -> its own totalTokens, and its usage and cost with its children's calls folded in so far
    _usage_of: dict[str, tuple[int, Usage, Cost]] = field(default_factory=dict)

    async def run(self) -> Stop:
        # What exists now (imported modules, config, clients) lives as long as the run: out of the cyclic
        # collector's way, its collections scan only what turns allocate (~1.2 ms less CPU a turn, measured).
        gc.freeze()
        if self.compactor is not None and not self._replied() and self.compactor.needed(self.conversation.tokens):
            self._say(f"warning: the system prompt and the task come to ~{self.conversation.tokens} tokens by "
                      f"estimate, "
                      f"near the {self.compactor.window}-token context window; nothing is compacted before the "
                      "model's first reply (a provider that refuses the prompt is answered as a too-long one)")
        while True:
            if reason := self.budget.exhausted():
                return Stop(reason)
            self.before_call()
            compactor = self.compactor
            # nothing to compact before the model's first reply: a first estimate (a guessed rate) is no reason
            if compactor is not None and (self.compact_requested or (
                    compactor.needed(self.conversation.tokens) and self._replied())):
                await self._compact()
            self.log.commit()
            try:
                reply = await self._call()
            except BudgetExhausted as exc:
                return Stop(exc.reason, exc.detail)
            self._record_reply(reply)
            if reply.finish_reason == UNREADABLE:
                if (stop := self._unreadable(reply)) is not None:
                    return stop
                continue
            if reply.tool_calls:
                if (stop := await self._run_tools(reply.tool_calls)) is not None:
                    return stop
                if not self.end_turn_requested:
                    continue
            self.end_turn_requested = False
            outcome = await self.turn_end()
            if isinstance(outcome, Stop):
                return outcome
            if outcome:
                self.say("prime_ci.gate_feedback", outcome)

    def before_call(self) -> None:
        """Deliver queued messages (from children, parents, siblings) and budget notes before the next call."""
        for custom_type, text, details in self.inbox() if self.inbox is not None else []:
            self.say(custom_type, text, details)
        for note in self.budget.warnings():
            self.say("prime_ci.budget_note", note)

    async def _call(self) -> ModelReply:
        """One turn's model call. A provider refusing the prompt as too long: compact, then one more try."""
        window = self.compactor.window if self.compactor is not None else None
        try:
            return await self.budget.call(self.model, self.conversation.messages, [TOOL], turn=True,
                                          prompt_chars=self.conversation.chars, window=window)
        except ContextOverflow as exc:
            if self.compactor is None:
                raise
            self.compactor.shrink(exc.window, self.conversation.tokens)
            compact = self.compactor.needed(self.conversation.tokens)
            if self.progress is not None:
                self.progress(f"the provider refused ~{self.conversation.tokens} prompt tokens and the completion "
                              f"allowance as too long for the model's window: "
                              f"{'compacting to fit' if compact else 'asking for less completion to fit'} "
                              f"{self.compactor.window}")
            if compact and not await self._compact():
                raise
            return await self.budget.call(self.model, self.conversation.messages, [TOOL], turn=True,
                                          prompt_chars=self.conversation.chars, window=self.compactor.window)

    async def _compact(self) -> bool:
        assert self.compactor is not None
        focus, self.compact_requested, self.compact_focus = self.compact_focus, False, None
        with doing("compaction"):
            done = await self.compactor.compact(self.conversation.messages, self.conversation.ids, focus=focus,
                                                kernel_names=self.kernel.user_names, task=self.task,
                                                tokens_before=self.conversation.tokens, on_spend=self.fold)
        if done is None:
            return False
        self.conversation.replace(*done)
        if self.progress is not None:
            self.progress(f"compacted the context to ~{self.conversation.tokens} tokens")
        return True

    def give_task(self, text: str) -> None:
        """The task: a user message (how Prime Agent lists a session: by its first one)."""
        text = clean_terminal_text(text)
        self.task = text
        eid = self.log.message("user", [{"type": "text", "text": text}])
        self.conversation.add({"role": "user", "content": text}, eid)

    def attribute(self, target: str, child_usage: dict[str, Any], *, origin: str, **extra: Any) -> None:
        """Fold one child model call's usage into the assistant entry whose cell spawned the child, as Prime
        Agent does: ``aggregateUsage`` is that entry's own usage plus every call folded into it so far, its
        ``totalTokens`` still the entry's own context size (child work is spend, not context)."""
        self._fold(target, Usage.from_session(child_usage), Cost.from_json(child_usage.get("cost") or {}),
                   childUsage=child_usage, origin=origin, **extra)

    def fold(self, usage: Usage, cost: Cost | None, source: str) -> None:
        """The spend of this agent's own calls that are not turns (``compaction``, ``refinement``), folded into
        its latest assistant entry: Prime Agent adds up only assistant usage, and with no child usage in the
        record it counts this spend as the agent's own, in its totals and in its sub-agent tree's alike."""
        if self.last_assistant is not None:
            self._fold(self.last_assistant, usage, cost or Cost(), childUsage=session_usage(Usage(), Cost()),
                       usageSource=source)

    def adopt(self, target: str, usage: dict[str, Any]) -> None:
        """An assistant entry logged before a resume, with its usage as the log left it (attributions folded)."""
        self.last_assistant = target
        self._usage_of[target] = (int(usage.get("totalTokens") or 0), Usage.from_session(usage),
                                  Cost.from_json(usage.get("cost") or {}))

    def _fold(self, target: str, usage: Usage, cost: Cost, **fields: Any) -> None:
        folded = self._usage_of.get(target)
        if folded is None:  # not an assistant entry of this session
            return
        context, total, spent = folded
        total, spent = total + usage, spent + cost
        self._usage_of[target] = context, total, spent
        self.log.append("child_usage_attributed", targetId=target,
                        aggregateUsage={**session_usage(total, spent), "totalTokens": context}, **fields)

    def answer_unanswered(self, call_id: str, text: str) -> None:
        """Log and add the result of a tool call an interruption left without one (a resume)."""
        name = next((c["function"]["name"] for m in reversed(self.conversation.messages)
                     for c in m.get("tool_calls") or [] if c["id"] == call_id), "ipython")
        self._tool_result(ToolCall(call_id, name, ""), text, is_error=True)

    def say(self, custom_type: str, text: str, details: dict[str, Any] | None = None) -> None:
        """A host message that enters the model's context as a user message."""
        text = clean_terminal_text(text)
        eid = self.log.custom_message(custom_type, text, details)
        self.conversation.add({"role": "user", "content": text}, eid)

    def _replied(self) -> bool:
        """Whether the conversation holds a reply of the model's (this run's, or one it goes on from)."""
        return any(m.get("role") == "assistant" for m in self.conversation.messages)

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def _detail(self, lines: list[str]) -> None:
        for line in lines:
            if self.detail is not None:
                self.detail(line)

    def _record_reply(self, reply: ModelReply) -> None:
        if reply.text:
            self.last_text = reply.text
            if self.detail is not None:
                self._detail(console_detail.model_text(reply.text))
        parts: list[dict[str, Any]] = [{"type": "thinking", "thinking": reply.thinking}] if reply.thinking else []
        parts += [{"type": "text", "text": reply.text}] if reply.text else []
        parts += [{"type": "toolCall", "id": c.id, "name": c.name, "arguments": args_for_log(c)}
                  for c in reply.tool_calls]
        provider, model = split_model(reply.model)
        eid = self.log.message(
            "assistant", parts, api="openai-completions", provider=provider, model=model,
            usage=session_usage(reply.usage, reply.cost),
            stopReason="toolUse" if reply.tool_calls else _stop_reason(reply.finish_reason),
            **({"errorMessage": reply.errors[-1]} if reply.finish_reason == UNREADABLE and reply.errors else {}),
        )
        self._usage_of[eid] = reply.usage.total_tokens, reply.usage, reply.cost or Cost()
        self.last_assistant = eid
        self.log.custom("prime_ci.usage", {**self.budget.usage(), "attempts": reply.attempts})
        # "" and never null or absent: llama.cpp, llama-cpp-python and others answer 500 to a tool-only
        # assistant message without a content string
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": wire_arguments(c.arguments)}}
                for c in reply.tool_calls
            ]
        if reply.thinking_blocks:  # signed thinking Anthropic requires back with tool use; other text never
            message["thinking_blocks"] = reply.thinking_blocks
        self.conversation.add(message, eid)
        self._truncated = reply.truncated

    async def _run_tools(self, calls: list[ToolCall]) -> Stop | None:
        first, extra = calls[0], calls[1:]
        code, problem = parse_call(first)
        if code is None and self._truncated:
            problem = ("your reply was cut off at the completion token limit in the middle of this tool call, so "
                       "it was not run (the call above shows only the part that arrived). Send a shorter cell: "
                       "write long files in parts over several cells.")
        if code is None:
            self._tool_result(first, f"Error: {problem}", is_error=True)
        else:
            self._malformed = 0
            with doing("cell"):
                result = await self.kernel.execute(code, timeout=min(self.cell_timeout, self.budget.wall_left()))
            self._tool_result(first, result.text or "(no output)", is_error=not result.ok, cell=result)
            if self.progress is not None:
                lines = code.count("\n") + 1
                self.progress(f"turn {self.budget.turns}: ipython ({lines} lines) -> {result.status}, "
                              f"{result.chars} chars, {format_duration(result.duration_s)}")
            if self.detail is not None:
                self._detail(console_detail.cell(code, result.text))
            if self.on_cell is not None:
                await self.on_cell(code, result)
        for call in extra:
            self._tool_result(call, "Error: only one tool call per turn is executed; this one was not run.",
                              is_error=True)
        return self._malformed_stop("malformed tool calls in a row", problem) if code is None else None

    def _malformed_stop(self, what: str, last: str) -> Stop | None:
        """Count one more unusable reply in a row; the limit of them is a model error."""
        self._malformed += 1
        if self._malformed < MAX_MALFORMED:
            return None
        return Stop(StopReason.MODEL_ERROR, f"{endpoint(self.model)}: {MAX_MALFORMED} {what} (the last: "
                    f"{last[:160]})")

    def _unreadable(self, reply: ModelReply) -> Stop | None:
        """The server generated a reply it could not read (llama.cpp's 500 on a tool call cut off at the completion
        cap): tell the model, which then writes a different reply; a run of them is a model error."""
        if (stop := self._malformed_stop("replies in a row the server could not read", reply.errors[-1])) is not None:
            return stop
        self.say("prime_ci.unreadable_reply",
                 "The model server could not read your last reply, so nothing of it was run "
                 f"({reply.errors[-1][:200]}). It was most likely cut off at the completion token limit in the "
                 "middle of a tool call. Send a shorter cell: write long files in parts over several cells.")
        return None

    def _tool_result(self, call: ToolCall, text: str, *, is_error: bool, cell: CellResult | None = None) -> None:
        details = None if cell is None else {
            "status": cell.status, "chars": cell.chars, "duration_s": round(cell.duration_s, 3),
            "restarted": cell.restarted,
        }
        eid = self.log.message(
            "toolResult", [{"type": "text", "text": text}], toolCallId=call.id, toolName=call.name,
            isError=is_error, **({"details": details} if details else {}),
        )
        self.conversation.add({"role": "tool", "tool_call_id": call.id, "content": text}, eid)


def _stop_reason(finish: str) -> str:
    return {"length": "length", "stop": "stop", UNREADABLE: "error"}.get(finish, finish)
