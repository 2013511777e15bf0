"""Typed errors that map onto the documented exit codes."""

from __future__ import annotations

from pathlib import Path


class PrimeCIError(Exception):
    """Base class; ``exit_code`` is what the CLI exits with."""

    exit_code = 70


class ConfigError(PrimeCIError):
    """Usage or configuration error: nothing started (exit 2)."""

    exit_code = 2


class SandboxUnavailable(PrimeCIError):
    """``--sandbox on`` and the sandbox cannot be set up (exit 5)."""

    exit_code = 5


class PersistenceError(PrimeCIError):
    """The session log or artifacts cannot be written (exit 6)."""

    exit_code = 6


class LogCorruptError(PersistenceError):
    """A session log is damaged in its middle: never repaired silently."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class ModelError(PrimeCIError):
    """The provider kept failing after bounded retries, or refused auth (exit 4)."""

    exit_code = 4


class ContextOverflow(ModelError):
    """The provider refused the prompt as longer than the model's window (``window`` when it said how long)."""

    def __init__(self, message: str, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window


class KernelLost(PrimeCIError):
    """The kernel died and could not be brought back (``log``: its output, when it never started)."""

    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log
