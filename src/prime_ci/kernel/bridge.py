"""Host side of the host <-> kernel channel: a unix socket, one JSON request and reply per connection.

The host serves the socket on the same asyncio loop that awaits the running cell, so a cell that calls
``await gates.run()`` or ``await rlm(...)`` is answered while the host is still waiting for that cell: no
deadlock. The kernel side (``prime_ci.kernel.api``) uses a blocking socket on a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shutil
import socket
import struct
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prime_ci.isolation import hostuid

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


# a unix socket's path is capped at 107 bytes; the longest we make under the base is
# "/pci-xxxxxxxx-" + mkdtemp's 8 characters + "/bridge.sock"
_SOCKET_PATH_MAX = 107
_UNDER_BASE = len("/pci-xxxxxxxx-") + 8 + len("/bridge.sock")
_SHORT_BASE = "/tmp"


def _run_prefix(marker: str) -> str:
    return f"pci-{hashlib.sha256(marker.encode()).hexdigest()[:8]}-"


def socket_base() -> Path:
    """The directory bridges' socket directories go in: the temp directory, unless its path is too long for a
    socket under it (a deep ``TMPDIR``), then ``/tmp``."""
    temp = tempfile.gettempdir()
    if len(temp.encode()) + _UNDER_BASE <= _SOCKET_PATH_MAX:
        return Path(temp)
    return Path(_SHORT_BASE)


def run_dir(marker: str) -> Path:
    """A new private directory for a bridge's socket, named after the run whose marker is ``marker``, so that
    ``remove_run_dirs`` finds it after the run was killed."""
    return Path(tempfile.mkdtemp(prefix=_run_prefix(marker), dir=socket_base()))


def remove_run_dirs(marker: str) -> int:
    """Remove the bridge directories a (killed) run left; returns how many."""
    found = list(socket_base().glob(_run_prefix(marker) + "*"))
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return len(found)
MAX_REQUEST = 4 * 1024 * 1024
# the caller's process id, set by a bridge made with ``peer=True`` from the socket's credentials (SO_PEERCRED),
# never taken from the caller
PEER = "peer_pid"


class Refused(Exception):
    """A request the host declines; its message goes back to the cell as the error."""


class Bridge:
    def __init__(self, directory: Path | None = None, *, peer: bool = False) -> None:
        """``directory``: an empty private directory for the socket (removed on close), else a new temp dir;
        ``peer``: every request carries the calling process's id under ``PEER``."""
        self.peer = peer
        self._dir = directory or Path(tempfile.mkdtemp(prefix="pci-", dir=socket_base()))
        self.path = self._dir / "bridge.sock"
        self._handlers: dict[str, Handler] = {}
        self._server: asyncio.AbstractServer | None = None
        self.failures: list[BaseException] = []

    def register(self, op: str, handler: Handler) -> None:
        self._handlers[op] = handler

    async def start(self, owner: int | None = None) -> None:
        """Serve the socket; with ``owner`` (the sandbox's unprivileged uid), its directory and the socket are
        that uid's, so that a kernel running as it can connect."""
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=MAX_REQUEST)
        if owner is not None:
            hostuid.give(owner, [self._dir, self.path])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            reply = await self._dispatch(line, _peer_pid(writer) if self.peer else None)
            writer.write(json.dumps(reply, default=str).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the cell went away (interrupt, restart) or sent garbage: nothing to answer
        finally:
            writer.close()

    async def _dispatch(self, line: bytes, peer: int | None = None) -> dict[str, Any]:
        try:
            request = json.loads(line)
            op = request.pop("op")
            request.pop(PEER, None)
        except (ValueError, KeyError, AttributeError, TypeError, RecursionError):
            return {"ok": False, "error": "malformed bridge request"}
        if not isinstance(op, str):
            return {"ok": False, "error": "malformed bridge request"}
        if peer is not None:
            request[PEER] = peer
        handler = self._handlers.get(op)
        if handler is None:
            return {"ok": False, "error": f"unknown operation {op!r}"}
        try:
            return {"ok": True, "result": await handler(request)}
        except Refused as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a host bug must not hang the cell; the run ends with exit 70
            self.failures.append(exc)
            return {"ok": False, "error": f"internal error in prime-ci: {type(exc).__name__}: {exc}"}


def _peer_pid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(pid)


async def request(path: str, op: str, **args: Any) -> Any:
    """Async client: one request to a bridge; returns the result or raises Refused with its error."""
    reader, writer = await asyncio.open_unix_connection(path, limit=64 * 1024 * 1024)
    try:
        writer.write(json.dumps({"op": op, **args}).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    if not line:
        raise ConnectionError(f"{op}: the host closed the connection without a reply")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise Refused(reply.get("error", "unknown error"))
    return reply.get("result")
