"""What an entry of a Prime Agent session is in the request Prime Agent itself would send at the leaf.

Prime Agent builds a request in three steps: its agent's converter turns the context entries into model messages
(``!cmd`` runs as fenced output with their exit code, branch summaries and injected messages as user messages;
the records of a typed ``/compact``, its result, a compaction that failed and a refinement are not sent), the
provider layer drops turns that ended in an error and answers calls that got no result right after them, and the
chat-completions provider writes each message (text parts joined, blank ones left out, arguments as
``JSON.stringify`` writes them). ``provider_message`` is the first and last of these for one entry, with reasoning
sent as text, as Prime Agent sends it to a model other than the one that wrote it; ``Continuation`` in
``from_session`` does the middle one. These are the rules, not Prime Agent's code; a test
(``tests/runs/engine/test_from_session_parity.py``) holds them to its code over sessions it writes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from prime_ci.loop.tool_call import wire_arguments
from prime_ci.session.read import parts_text

BRANCH_SUMMARY_OPEN = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUMMARY_CLOSE = "</summary>"
# records Prime Agent keeps in the session for people, never sends: a typed session command (``/compact …``) and
# its result, a compaction that was skipped, cancelled or failed, a refinement's outcome
NOT_SENT = frozenset({"session_slash_command", "session_slash_command_result", "compaction_outcome",
                      "refinement_outcome"})
_BACKTICKS = re.compile(r"`+")


def bash_text(message: dict[str, Any]) -> str:
    """A ``!cmd`` the user ran, as the model reads it: the command, its output fenced (the fence longer than any
    backtick run in it), then whether it was cancelled or its exit code when not 0, then truncation."""
    output = str(message.get("output") or "")
    if output:
        fence = "`" * max(3, max((len(m) for m in _BACKTICKS.findall(output)), default=0) + 1)
        text = f"{fence}\n{output}\n{fence}"
    else:
        text = "(no output)"
    code = message.get("exitCode")
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif code is not None and code != 0:
        text += f"\n\nCommand exited with code {_js_number(code)}"
    if message.get("truncated"):
        full = message.get("fullOutputPath")
        text += f"\n\n[Output truncated. Full output: {full}]" if full else "\n\n[Output truncated.]"
    return f"Ran `{message.get('command', '')}`\n{text}"


def _js_number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _arguments(args: Any) -> str:
    """A logged call's arguments as the request carries them (``JSON.stringify``; raw text made valid)."""
    if isinstance(args, dict) and isinstance(args.get("__raw__"), str):
        return wire_arguments(args["__raw__"])
    return json.dumps(args if args is not None else {}, separators=(",", ":"), ensure_ascii=False)


def _assistant(message: dict[str, Any]) -> dict[str, Any] | None:
    if message.get("stopReason") in ("error", "aborted"):
        return None  # an unfinished turn is not sent again
    parts = [p for p in message.get("content") or [] if isinstance(p, dict)]
    texts = [p.get("thinking") if p.get("type") == "thinking" and not p.get("redacted") else p.get("text")
             if p.get("type") == "text" else None for p in parts]
    text = "".join(t for t in texts if isinstance(t, str) and t.strip())
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = [p for p in parts if p.get("type") == "toolCall"]
    if calls:
        out["tool_calls"] = [{"id": p["id"], "type": "function", "function": {
            "name": p["name"], "arguments": _arguments(p.get("arguments"))}} for p in calls]
    elif not text:
        return None  # no text and no call: nothing to send
    return out


def provider_message(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The chat-completions message of one context entry, or None when Prime Agent sends nothing for it."""
    kind = entry.get("type")
    if kind == "branch_summary":
        summary = entry.get("summary")
        return {"role": "user", "content": BRANCH_SUMMARY_OPEN + summary + BRANCH_SUMMARY_CLOSE} if summary else None
    if kind == "custom_message":
        if entry.get("customType") in NOT_SENT:
            return None
        return {"role": "user", "content": parts_text(entry.get("content") or "")}
    if kind != "message" or not isinstance(entry.get("message"), dict):
        return None
    message = entry["message"]
    role = message.get("role")
    if role == "bashExecution":
        return None if message.get("excludeFromContext") else {"role": "user", "content": bash_text(message)}
    if role == "assistant":
        return _assistant(message)
    if role == "toolResult":
        content = message.get("content") or []
        text = "\n".join(p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text")
        return {"role": "tool", "tool_call_id": message.get("toolCallId", ""), "content": text}
    if role == "user":
        content = message.get("content")
        return {"role": "user", "content": parts_text(content)} if content != [] else None
    return None
