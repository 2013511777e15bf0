"""Who may ask the root what over the bridges: the root kernel's bridge never speaks for a child, the
children's bridge only for a child with its token from its own host process (``Family.sender``), and the root
signals only processes a child started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prime_ci.kernel.bridge import Handler, Refused


def as_root(handler: Handler) -> Handler:
    """A handler on the root kernel's bridge: the root kernel is never a child."""

    async def guarded(request: dict[str, Any]) -> Any:
        if "child" in request or "token" in request:
            raise Refused("this bridge serves the root agent's kernel: it cannot speak for a child")
        return await handler(request)

    return guarded


def as_child(handler: Handler) -> Handler:
    """A handler on the children's bridge: only a child, with its token, may call it."""

    async def guarded(request: dict[str, Any]) -> Any:
        if "child" not in request:
            raise Refused("this bridge serves rlm children only")
        return await handler(request)

    return guarded


def descends_from(pid: int, ancestor: int, depth: int = 6) -> bool:
    """Whether ``pid`` is ``ancestor`` or below it (a child host's kernel, or bwrap's child): the only processes
    the root signals for a child."""
    for _ in range(depth):
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            return False
    return False
