"""agent_message between members of a family: who may reach whom, the size and rate limits, the envelope."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from prime_ci.children.member import Member, Message, children_of
from prime_ci.kernel.bridge import Refused

MAX_MESSAGE = 16_384
MAX_PENDING = 20


def resolve(members: Mapping[str, Member], sender: Member, role: Any, name: Any) -> tuple[Member, str]:
    """The receiver (parent, a child or a sibling of ``sender``; ``members`` by id) and how it relates to the
    sender."""
    everyone = members.values()
    if role == "parent":
        if name is not None:
            raise Refused("agent_message: receiver_name must be omitted for the parent")
        if sender.parent is None:
            raise Refused("agent_message: the root agent has no parent")
        return members[sender.parent], "child"
    if role not in ("child", "sibling"):
        raise Refused('agent_message: receiver_role must be "parent", "child" or "sibling"')
    if not name:
        raise Refused(f"agent_message: receiver_name is required for a {role}")
    pool = children_of(everyone, sender) if role == "child" else [
        m for m in everyone if m.parent == sender.parent and m.id != sender.id and m.parent
    ]
    for member in pool:
        if member.name == name or member.id == name:
            if member.status in ("completed", "error"):
                raise Refused(f"agent_message: {member.name} has ended ({member.status})")
            return member, "parent" if role == "child" else "sibling"
    raise Refused(f"agent_message: no {role} named {name!r} (reach is limited to parent, siblings, children)")


def checked_text(text: Any) -> str:
    """The message, once it is a non-empty string within the size limit (checked before the receiver)."""
    if not isinstance(text, str) or not text.strip():
        raise Refused("agent_message: the message must be a non-empty string")
    if len(text) > MAX_MESSAGE:
        raise Refused(f"agent_message: {len(text)} characters is over the limit of {MAX_MESSAGE}")
    return text


def admit(sender: Member, target: Member) -> None:
    """Whether the sender has a token left (3, then one per second) and the target's queue has room; the token
    is spent only then."""
    now = time.monotonic()
    sender.bucket = min(3.0, sender.bucket + (now - sender.bucket_at))
    sender.bucket_at = now
    if sender.bucket < 1.0:
        raise Refused("agent_message: rate limit (3 messages, then 1 per second)")
    if len(target.inbox) >= MAX_PENDING:
        raise Refused(f"agent_message: {target.name} already has {MAX_PENDING} pending messages")
    sender.bucket -= 1.0


def envelope(sender: Member, target: Member, relation: str, text: str) -> tuple[Message, dict[str, Any]]:
    """The message queued for ``target`` and the sender's receipt (Prime Agent's agent_message shapes)."""
    msg_id = f"agentmsg_{secrets.token_hex(8)}"
    delivered = target.waiting
    body = f"[from {relation}:{sender.name}]\n{text}" if relation != "parent" else f"[from parent]\n{text}"
    sent_by = {k: v for k, v in sender.endpoint().items() if k != "runtimeKind"}
    message: Message = ("agent_message", body, {"id": msg_id, "message": text, "from": sent_by,
                                                "fromRelationship": relation, "target": target.endpoint()})
    stamp = datetime.now(UTC).isoformat()
    receipt = {"id": msg_id, "source": "agent_message", "message": text, "from": sent_by,
               "target": target.endpoint(), "deliveryStatus": "delivered" if delivered else "queued",
               "deliveredAt" if delivered else "queuedAt": stamp}
    return message, receipt
