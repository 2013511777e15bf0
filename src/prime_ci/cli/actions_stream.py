"""stdout and stderr in a GitHub Actions log (``GITHUB_ACTIONS=true``): one way out for every line prime-ci prints.

The runner reads workflow commands in everything a step prints. ``guard`` puts a :class:`GuardedStream` in front of
``sys.stdout`` and ``sys.stderr`` when the process starts, so all text (the console's lines, which quote the
repository, the model, setup, builds and gates; click's errors; a library's warnings; a traceback) has ``::`` and
``##[`` broken wherever they are (:func:`~prime_ci.isolation.workflow_commands.neutral`). prime-ci's own commands
take the one other way, :func:`write_command`, built whole by ``workflow_commands.command``.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from typing import TextIO

from prime_ci.isolation.workflow_commands import inert_json, neutral

HOLD = 1024  # of the line being written: enough to break a pair split across two writes


def in_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


class GuardedStream(io.TextIOBase):
    """A text stream that writes ``neutral`` text to ``raw``; :meth:`command` writes a line as it is."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw
        self._line = ""  # what was written of the current line (neutralised), up to HOLD characters
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        with self._lock:
            out = neutral(self._line + s)[len(self._line):]  # a break only ever goes before a character of s
            self.raw.write(out)
            self._remember(out)
        return len(s)

    def command(self, text: str) -> None:
        """``text`` (one or more whole lines of prime-ci's own workflow commands) as it is, from a line start."""
        with self._lock:
            self.raw.write(("\n" if self._line else "") + text + "\n")
            self._line = ""
            self.raw.flush()

    def _remember(self, out: str) -> None:
        cut = out.rfind("\n")
        self._line = (out[cut + 1:] if cut >= 0 else self._line + out)[-HOLD:]

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.raw, "encoding", None) or "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw, "errors", None)


def guard() -> None:
    """In a GitHub Actions log, put a :class:`GuardedStream` in front of stdout and stderr (once)."""
    if not in_actions():
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream))


def write_command(text: str) -> None:
    """prime-ci's own workflow command(s) on stdout, where the runner reads them, after what stderr said so far."""
    sys.stderr.flush()
    out = sys.stdout
    if isinstance(out, GuardedStream):
        out.command(text)
    else:
        out.write(text + "\n")
        out.flush()


def json_for_stdout(text: str) -> str:
    """A JSON document for stdout: in an Actions log its strings hold no ``::`` or ``##[`` (written as escapes, the
    same values to a parser), so the guard leaves it as it is."""
    return inert_json(text) if in_actions() else text
