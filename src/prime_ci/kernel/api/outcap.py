"""The kernel's output cap: of what one cell prints, the first ``HEAD`` characters are sent, then only the last
``TAIL`` (at the end of the cell, after a ``[... N characters elided by the kernel ...]`` line).

ipykernel holds a cell's output in memory until its IO thread sends it (one message every 0.2 s), messages
queue in the kernel and in the host until read, and IPython 9 keeps every output of every cell in memory for
``%notebook``: a cell printing a gigabyte held it several times over in both processes. The cap is the
``write`` of the kernel's stdout and stderr, which ``print`` and ipykernel's reader of fds 1 and 2 (the output
of subprocesses) both call; IPython's per-cell wrapper of ``write`` (the one that keeps the output) is refused,
and its output history keeps nothing. ipykernel's reader also copies subprocess output to the kernel's log,
without bound, stopping for good at the first failed write (the file size limit): that copy goes to /dev/null
(ipykernel's own log lines keep their handle on the log).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

HEAD = 1_100_000  # a bit over what the host keeps per cell (output.KEPT_OUTPUT)
TAIL = 64_000
ELIDED = re.compile(r"\[\.\.\. (\d+) characters elided by the kernel \.\.\.\]")


class Cap:
    """One stream's cap: a running count beyond the head, and the last ``TAIL`` characters."""

    def __init__(self, write: Callable[[str], Any]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._passed = 0
        self._held = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0

    def write(self, text: str) -> int:
        size = len(text)
        with self._lock:
            room = HEAD - self._passed
            if room > 0:
                self._passed += min(room, size)
                self._write(text[:room])
                text = text[room:]
            if text:
                self._held += len(text)
                text = text[-TAIL:]
                self._tail.append(text)
                self._tail_len += len(text)
                while self._tail_len - len(self._tail[0]) >= TAIL:
                    self._tail_len -= len(self._tail.popleft())
        return size

    def end(self) -> None:
        """The cell ended: send the tail; the next cell starts with a fresh head."""
        with self._lock:
            tail = "".join(self._tail)[-TAIL:]
            elided = self._held - len(tail)
            self._passed = self._held = self._tail_len = 0
            self._tail.clear()
            if elided > 0:
                self._write(f"\n[... {elided} characters elided by the kernel ...]\n")
            if tail:
                self._write(tail)


class _CappedWrite:
    """``write`` of the stream class: a capped stream's cap, else the original; assignments are ignored."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original

    def __get__(self, stream: Any, owner: type | None = None) -> Any:
        if stream is None:
            return self.original
        cap = stream.__dict__.get("_prime_ci_cap")
        return cap.write if cap is not None else functools.partial(self.original, stream)

    def __set__(self, stream: Any, value: Any) -> None:
        pass


class _NoOutputs(dict[int, list[Any]]):
    """IPython 9's ``history_manager.outputs`` (every output of every cell, for ``%notebook``): keeps none."""

    def __missing__(self, key: int) -> list[Any]:
        return []


def install(shell: Any) -> None:
    """Cap the kernel's stdout and stderr per execution of ``shell`` (the kernel's InteractiveShell)."""
    caps = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or "_prime_ci_cap" in vars(stream):
            continue
        cls = type(stream)
        if not isinstance(cls.__dict__.get("write"), _CappedWrite):
            original = cls.write
            cls.write = _CappedWrite(original)
        else:
            original = cls.__dict__["write"].original
        cap = Cap(functools.partial(original, stream))
        vars(stream)["_prime_ci_cap"] = cap
        if isinstance(getattr(stream, "_original_stdstream_copy", None), int):
            stream._original_stdstream_copy = os.open(os.devnull, os.O_WRONLY)
        caps.append(cap)
    if hasattr(shell, "history_manager"):
        shell.history_manager.outputs = _NoOutputs()

    def end(*_: Any) -> None:
        for cap in caps:
            cap.end()

    if caps:
        shell.events.register("pre_execute", end)  # what ran between cells is sent before the next cell's output
        shell.events.register("post_execute", end)
