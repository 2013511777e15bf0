"""One agent of an rlm family as the root host tracks it: its process, inbox, rate bucket, spend and
session identity."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Message = tuple[str, str, dict[str, Any]]  # (customType, text, details) for the receiver's context


@dataclass
class Member:
    id: str
    name: str
    parent: str | None
    depth: int
    model: str
    session_dir: Path
    token: str = ""
    status: str = "running"  # running | idle | completed | error
    proc: asyncio.subprocess.Process | None = None
    kernel_pid: int | None = None
    inbox: deque[Message] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: bool = False
    replied: bool = False
    last_text: str = ""
    stopping: bool = False
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # None once a call's price was unknown
    bucket: float = 3.0
    bucket_at: float = field(default_factory=time.monotonic)
    branch: str | None = None
    session_id: str = ""  # its session header's id (a child reports it when it starts)
    spawned_from: str | None = None  # the parent's assistant entry whose cell spawned it: its usage goes there
    origin: str = "spawn_task"  # what its current work answers: the task, an agent message, anything else
    attributions: list[dict[str, Any]] = field(default_factory=list)  # its children's usage, for its own log

    def handle(self) -> dict[str, Any]:
        return {"rlm_child_id": self.id, "name": self.name, "session_dir": str(self.session_dir), "model": self.model}

    def endpoint(self) -> dict[str, Any]:
        """Prime Agent's agent-message endpoint: the active session is the member id in this run's family."""
        return {"activeSessionId": self.id, "sessionId": self.session_id, "sessionName": self.name,
                "runtimeKind": "top-level" if self.parent is None else "subagent"}

    def take_attributions(self) -> list[dict[str, Any]]:
        items, self.attributions = self.attributions, []
        return items


def children_of(members: Iterable[Member], parent: Member) -> list[Member]:
    return [m for m in members if m.parent == parent.id]
