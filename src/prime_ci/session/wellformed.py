"""Whether a session entry has the shape its readers take for granted (Prime Agent's message types).

The reader (``session.read``) accepts any JSON object with a ``type``: damage is reported, never fatal. What is
built from the entries (a conversation to go on with, an export's sub-agent record) needs more: a message with a
role, content that is a list of parts (a user's may be a string), parts that are objects with a type, text that
is a string, tool calls with an id and a name, tool results naming their call. ``malformed`` says what is wrong
with an entry in a few words, or None; the caller names the file and the line.
"""

from __future__ import annotations

from typing import Any

ROLES_WITH_PARTS = ("user", "assistant", "toolResult")


def _kind(value: Any) -> str:
    return {str: "a string", dict: "an object", list: "a list", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


def _bad_parts(content: Any, *, tool_calls: bool) -> str | None:
    """What is wrong with a list of content parts, or None."""
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return f"a content part that is {_kind(part)} without a type"
        kind = part["type"]
        if kind == "text" and not isinstance(part.get("text"), str):
            return f"a text part whose text is {_kind(part.get('text'))}"
        if kind == "toolCall" and tool_calls and not (isinstance(part.get("id"), str) and part["id"]
                                                      and isinstance(part.get("name"), str)):
            return "a tool call without a string id and name"
    return None


def malformed(entry: dict[str, Any]) -> str | None:
    """What is wrong with a ``message``, ``custom_message`` or ``branch_summary`` entry, or None (other kinds,
    and roles prime-ci does not read, are never malformed here)."""
    kind = entry.get("type")
    if kind == "custom_message":
        content = entry.get("content")
        if isinstance(content, str):
            return None
        if not isinstance(content, list):
            return f"a custom_message whose content is {_kind(content)}, not a string or a list of parts"
        return _bad_parts(content, tool_calls=False)
    if kind == "branch_summary":
        summary = entry.get("summary")
        return None if isinstance(summary, str) else f"a branch_summary whose summary is {_kind(summary)}"
    if kind != "message":
        return None
    message = entry.get("message")
    if not isinstance(message, dict):
        return f"a message entry whose message is {_kind(message)}, not an object"
    role = message.get("role")
    if not isinstance(role, str):
        return f"a message whose role is {_kind(role)}"
    if role not in ROLES_WITH_PARTS:
        return None
    content = message.get("content")
    if role == "user" and isinstance(content, str):
        return None
    if not isinstance(content, list):
        article = "an" if role == "assistant" else "a"
        return f"{article} {role} message whose content is {_kind(content)}, not a list of parts"
    if role == "toolResult" and not isinstance(message.get("toolCallId"), str):
        return f"a toolResult message whose toolCallId is {_kind(message.get('toolCallId'))}"
    return _bad_parts(content, tool_calls=role == "assistant")
