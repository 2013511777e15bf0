"""Why a run (or a child) stopped, and the exit code each reason maps to: the one definition.

The values are persisted (result.json ``stop_reason``, the session's ``prime_ci.stop`` entry, the action's
``stop-reason`` output) and never change. Exit 2 (usage error) has no stop reason: nothing started.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StopReason(StrEnum):
    COMPLETED = "completed"
    GATES_FAILED = "gates_failed"
    MAX_TURNS = "max_turns"
    MAX_TOKENS = "max_tokens"
    MAX_WALL = "max_wall"
    MAX_COST = "max_cost"
    MODEL_ERROR = "model_error"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    PERSISTENCE_ERROR = "persistence_error"
    SECURITY_STOP = "security_stop"
    NO_CHANGES = "no_changes"
    SETUP_FAILED = "setup_failed"
    ENVIRONMENT_ERROR = "environment_error"
    INTERNAL_ERROR = "internal_error"
    INTERRUPTED = "interrupted"

    @property
    def exit_code(self) -> int:
        """The process exit code; ``interrupted`` is 130 here, 143 when the signal was SIGTERM."""
        return EXIT_CODES[self]

    @property
    def budget(self) -> bool:
        """A budget ran out (exit 3)."""
        return self in BUDGET


BUDGET = frozenset({StopReason.MAX_TURNS, StopReason.MAX_TOKENS, StopReason.MAX_WALL, StopReason.MAX_COST})
EXIT_CODES: dict[StopReason, int] = {
    StopReason.COMPLETED: 0, StopReason.GATES_FAILED: 1, **dict.fromkeys(BUDGET, 3), StopReason.MODEL_ERROR: 4,
    StopReason.SANDBOX_UNAVAILABLE: 5, StopReason.PERSISTENCE_ERROR: 6, StopReason.SECURITY_STOP: 7,
    StopReason.NO_CHANGES: 8, StopReason.SETUP_FAILED: 9, StopReason.ENVIRONMENT_ERROR: 10,
    StopReason.INTERNAL_ERROR: 70,
    StopReason.INTERRUPTED: 130,
}
SIGTERM_EXIT = 143


@dataclass
class Stop:
    reason: StopReason
    detail: str = ""
