"""One cell's output on the host: what the model sees (bounded to a head and a tail, counting what the kernel's
own output cap and this bound dropped) and what the notebook and ``history`` keep (up to ``KEPT_OUTPUT``
characters), both cleaned of terminal control sequences."""

from __future__ import annotations

from collections import deque
from typing import Any

from prime_ci.isolation.untrusted import TerminalStream, clean_terminal_text
from prime_ci.kernel.api.outcap import ELIDED
from prime_ci.kernel.launch import DEFAULT_LIMIT

KEPT_OUTPUT = 1_000_000  # per cell, for the notebook and `history`; the model sees DEFAULT_LIMIT


class BoundedText:
    """Keeps the first and last ``limit // 2`` characters of a stream, counting what it drops."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0

    def add(self, text: str) -> None:
        if not text:
            return
        self.total += len(text)
        room = self.head_limit - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_limit:
            self._tail_len -= len(self._tail.popleft())

    def text(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if len(tail) > self.tail_limit:
            tail = tail[-self.tail_limit :]
        elided = self.total - len(head) - len(tail)
        if elided <= 0:
            return head + tail
        return f"{head}\n[... {elided} characters elided; full output in `history` ...]\n{tail}"


def cell_text(outputs: list[dict[str, Any]]) -> str:
    """The kept text of a cell's outputs, in order, without terminal control sequences."""
    parts = []
    for o in outputs:
        if o["output_type"] == "stream":
            parts.append(o["text"])
        elif o["output_type"] == "error":
            parts.append("\n".join(o["traceback"]) + "\n")
        else:
            parts.append(o["data"].get("text/plain", "") + "\n")
    return clean_terminal_text("".join(parts))


class CellOutput:
    """One cell's output as it arrives: the bounded text for the model and the kept outputs for the notebook,
    both cleaned of terminal control sequences. Stream text goes through a :class:`TerminalStream` per stream
    name; what it holds back is flushed before other output, so the order of the cell's output is kept."""

    def __init__(self, limit: int) -> None:
        self.out = BoundedText(limit)
        self.outputs: list[dict[str, Any]] = []
        self._streams: dict[str, TerminalStream] = {}

    def collect(self, kind: str, content: dict[str, Any]) -> str | None:
        """Add one iopub message; return an error summary for ``error`` messages."""
        if kind == "stream":
            name, text = str(content.get("name", "stdout")), str(content.get("text", ""))
            self.finish(but=name)
            stream = self._streams.setdefault(name, TerminalStream())
            self._stream(name, stream.feed(text))
            self.out.total += sum(int(n) for n in ELIDED.findall(text))  # what the kernel's output cap dropped
        elif kind in ("execute_result", "display_data"):
            self.finish()
            text = clean_terminal_text(str(content.get("data", {}).get("text/plain", "")))
            if text:
                self.out.add(text if text.endswith("\n") else text + "\n")
            self.outputs.append({"output_type": kind, "data": {"text/plain": text}, **(
                {"execution_count": content.get("execution_count")} if kind == "execute_result" else {}
            )})
        elif kind == "error":
            self.finish()
            traceback = [clean_terminal_text(str(line)) for line in content.get("traceback", [])]
            ename = clean_terminal_text(str(content.get("ename", "")))
            evalue = clean_terminal_text(str(content.get("evalue", "")))
            self.out.add("\n".join(traceback) + "\n")
            self.outputs.append({"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback})
            return f"{ename or 'Error'}: {evalue}"
        return None

    def note(self, text: str) -> None:
        """A note from the host, after everything the cell printed."""
        self.finish()
        self.out.add(text)

    def finish(self, but: str | None = None) -> None:
        """Pass on what the streams (all, or all but ``but``) hold back."""
        for name, stream in self._streams.items():
            if name != but:
                self._stream(name, stream.flush())

    def _stream(self, name: str, text: str) -> None:
        if not text:
            return
        self.out.add(text)
        kept = self.out.total - len(text)
        if kept >= KEPT_OUTPUT:
            return
        if kept + len(text) > KEPT_OUTPUT:
            text = text[: KEPT_OUTPUT - kept] + f"\n[... output beyond {KEPT_OUTPUT} characters not kept ...]\n"
        if self.outputs and self.outputs[-1]["output_type"] == "stream" and self.outputs[-1]["name"] == name:
            self.outputs[-1]["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})
