"""Time to green is when the first full round passed (issue 40): a fast rerun of the failing tests that passes
is not green (the full gates still run after it), nor is a build round."""

from __future__ import annotations

from typing import Any

from prime_ci.gates.judge import time_to_green


def entry(kind: str, passed: bool, at_s: float) -> dict[str, Any]:
    """A round as ``Judge._record`` logs it (the fields time to green reads, and the others beside them)."""
    return {"round": 1, "kind": kind, "duration_s": 1.0, "passed": passed, "gates": ["pytest"], "on_demand": False,
            "at_s": at_s}


def test_a_passing_fast_round_is_not_green_the_full_round_after_it_is() -> None:
    rounds = [entry("full", False, 10.0), entry("build", False, 15.0), entry("fast", True, 20.0),
              entry("full", False, 30.0), entry("fast", True, 40.0), entry("full", True, 50.0)]
    assert time_to_green(rounds) == 50.0
    assert time_to_green(rounds[:5]) is None, "only fast rounds passed: never green"
