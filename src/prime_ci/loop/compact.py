"""Compaction: when the context nears the model's window (or on ``compact.run()``), older turns are replaced by
a structured summary. Recent turns stay verbatim; the cut never falls on a tool result (a tool result always
keeps the assistant call it answers). The kernel keeps running, so its variables survive and the summary names
them. The session log and ``history`` keep everything.

A compaction is one ``compaction`` entry, and the context after it is what Prime Agent's context builder makes
of that entry: the summary first, then the entries from ``firstKeptEntryId`` up to the compaction, then the
entries after it. So the system prompt (never logged) is the only head kept: the task text goes into the summary,
verbatim, and the summary is all that stands for the summarized part. ``engine/resume.py`` rebuilds the same way.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prime_ci.loop.budget import BudgetExhausted, Meter
from prime_ci.model.protocol import Model, ModelReply
from prime_ci.model.usage import Cost, TokenRate, Usage
from prime_ci.session.log import SessionLog

THRESHOLD = 0.8  # compact when the estimated prompt passes this share of the window
KEEP = 0.25  # share of the window kept verbatim after a compaction
TOOL_CLIP = 2000
TRANSCRIPT_CHARS = 120_000
SUMMARY_TOKENS = 2000
MARGIN_TOKENS = 64  # message framing the estimate does not see
ATTEMPTS = 2  # a summary cut short at its token limit is asked for once more, over half the transcript
CUT_SHORT = "[this summary was cut short at the summarizer's token limit]"

INSTRUCTIONS = """You are compacting the working context of an autonomous coding agent. Summarize the \
conversation below so the agent can continue without it. Use exactly these headings:

## Goal
## Constraints & Preferences
## Progress
### Done
### In Progress
### Blocked
## Key Decisions
## Next Steps
## Critical Context

Be concrete: file paths, function names, commands, error messages, test names, numbers. The agent's Python \
kernel keeps running, so name the important variables it defined and what they hold. Answer with the summary \
only."""


# How the model sees a compaction entry: a user message wrapping its summary, laid out as Prime Agent renders one,
# so a session continued there hands the model the same text as prime-ci does.
SUMMARY_OPEN = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
SUMMARY_CLOSE = "\n</summary>"


def summary_message(summary: str) -> dict[str, Any]:
    return {"role": "user", "content": SUMMARY_OPEN + summary + SUMMARY_CLOSE}


def summary_text(task: str, summary: str, names: list[str]) -> str:
    """The ``summary`` of a compaction entry: the task as given, the summarizer's answer, the kernel's names."""
    kernel = ("The Python kernel was not restarted: these variables are still defined: "
              + (", ".join(names[:200]) if names else "(none)"))
    parts = [f"The task, as it was given:\n{task}"] if task else []
    return "\n\n".join([*parts, summary, kernel])


def _serialize(messages: list[dict[str, Any]], limit: int) -> str:
    parts: list[str] = []
    for m in messages:
        role = m["role"]
        content = m.get("content") or ""
        if role == "tool":
            text = str(content)
            parts.append("[Tool result]: " + (text if len(text) <= TOOL_CLIP else text[:TOOL_CLIP] + " …[clipped]"))
            continue
        if content:
            parts.append(f"[{role.capitalize()}]: {content}")
        for call in m.get("tool_calls") or []:
            parts.append(f"[Assistant tool call]: {call['function']['arguments']}")
    text = "\n\n".join(parts)
    return text if len(text) <= limit else "[… earlier part omitted …]\n" + text[-limit:]


@dataclass
class Compactor:
    model: Model
    budget: Meter
    log: SessionLog
    window: int
    threshold: float = THRESHOLD
    keep: float = KEEP
    rate: TokenRate = field(default_factory=TokenRate)  # the model's tokens per character (``Budget.rate``)
    progress: Callable[[str], None] | None = None

    def needed(self, tokens: int) -> bool:
        return tokens > self.threshold * self.window

    def shrink(self, window: int | None, tokens: int) -> None:
        """The provider refused ``tokens`` as too long: take its window when it said one, else assume the
        prompt was a tenth over it."""
        self.window = min(self.window, window if window is not None else max(1000, int(tokens * 0.9)))

    def request_shape(self) -> tuple[int, int]:
        """(transcript chars, summary tokens) for a compaction request that fits the window with its answer, at
        the model's calibrated rate (an upper bound of what the provider will count)."""
        summary = min(SUMMARY_TOKENS, self.window // 4)
        left = self.window - summary - self.rate.tokens(len(INSTRUCTIONS) + 200) - MARGIN_TOKENS  # and a focus
        return max(600, min(TRANSCRIPT_CHARS, self.rate.chars(left))), summary

    def status(self, tokens: int) -> dict[str, Any]:
        return {"tokens": tokens, "context_window": self.window, "percent": round(100 * tokens / self.window, 1),
                "threshold_percent": round(100 * self.threshold)}

    def cut_index(self, messages: list[dict[str, Any]], start: int) -> int | None:
        """First message kept verbatim: recent messages within the keep share, never a tool result."""
        sizes = [len(json.dumps(m, ensure_ascii=False)) for m in messages]
        # keep at most a quarter of the window, and at most a third of what there is (on-demand compaction)
        budget_chars = min(self.rate.chars(int(self.keep * self.window)), sum(sizes[start:]) // 3)
        used, cut = 0, len(messages)
        for i in range(len(messages) - 1, start - 1, -1):
            used += sizes[i]
            if used > budget_chars:
                break
            cut = i
        while cut < len(messages) and messages[cut]["role"] == "tool":
            cut += 1
        return cut if cut > start else None

    async def compact(
        self, messages: list[dict[str, Any]], ids: list[str | None], *, focus: str | None,
        kernel_names: Callable[[], Awaitable[list[str]]], task: str, tokens_before: int,
        on_spend: Callable[[Usage, Cost | None, str], None] | None = None,
    ) -> tuple[list[dict[str, Any]], list[str | None]] | None:
        """Summarize messages[1:cut] (all but the system prompt and the kept part); returns the new (messages,
        ids), or None when there is nothing to cut. Every message but the system prompt has its entry id.
        ``tokens_before``: the context's size as the caller measures it (what ``needed`` was asked about);
        ``on_spend`` hears every summarizer call's usage (the agent logs it where Prime Agent adds usage up)."""
        head = 1
        cut = self.cut_index(messages, head)
        if cut is None:
            return None
        assert all(ids[head:]), "a message in the context has no session entry"
        prompt = INSTRUCTIONS + (f"\n\nFocus especially on: {focus[:200]}" if focus else "")
        limit = TRANSCRIPT_CHARS
        for attempt in range(1, ATTEMPTS + 1):
            transcript, summary_tokens = self.request_shape()  # again: the first call calibrated the rate
            text = _serialize(messages[head:cut], min(transcript, limit))
            request = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
            self.log.commit()  # a commit point: every entry is durable before any model call, this one included
            try:
                reply = await self.budget.call(self.model, request, [], turn=False, max_tokens=summary_tokens,
                                               window=self.window)
            except BudgetExhausted:
                return None
            # the summarizer's spend, so a resume restores it; also the entry a compaction that keeps no message
            # points at (firstKeptEntryId names an entry; this one adds nothing to the context)
            spent = self.log.custom("prime_ci.usage", {**self.budget.usage(), "compaction": True})
            if on_spend is not None:
                on_spend(reply.usage, reply.cost, "compaction")
            if not reply.truncated:
                break
            self._cut_short(reply, attempt, len(text))
            limit = len(text) // 2
        names = await kernel_names()
        text = reply.text.strip() or "(the summarizer returned nothing)"
        summary = summary_text(task, f"{text}\n\n{CUT_SHORT}" if reply.truncated else text, names)
        first_kept = ids[cut] if cut < len(ids) else spent
        details = {"focus": focus, "kernelNames": names[:200], "messagesSummarized": cut - head,
                   "summaryCutShort": reply.truncated, "attempts": attempt}
        eid = self.log.append("compaction", summary=summary, firstKeptEntryId=first_kept, tokensBefore=tokens_before,
                              details=details)
        return [messages[0], summary_message(summary), *messages[cut:]], [ids[0], eid, *ids[cut:]]

    def _cut_short(self, reply: ModelReply, attempt: int, transcript: int) -> None:
        """Say (console and session) that a summary stopped at its token limit, and what happens next."""
        retry = attempt < ATTEMPTS
        then = "asking again over half the transcript" if retry else "kept, marked as cut short"
        text = (f"the compaction summary was cut short at {reply.usage.completion_tokens} tokens "
                f"(finish_reason=length, {reply.usage.prompt_tokens} prompt tokens, window {self.window}): {then}")
        self.log.custom("prime_ci.compaction_cut_short", {
            "attempt": attempt, "retried": retry, "transcript_chars": transcript,
            "prompt_tokens": reply.usage.prompt_tokens, "completion_tokens": reply.usage.completion_tokens})
        if self.progress is not None:
            self.progress(text)
