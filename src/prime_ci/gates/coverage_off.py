"""Coverage thresholds in fast reruns: off, and the model is told.

A fast rerun runs a few tests, which cover less of the code than the suite, so a coverage threshold would fail
every narrowed run however right the fix (and show the model a coverage failure that is not one). The narrowed
command turns thresholds off; the full gate keeps them.

- pytest-cov: ``--cov-fail-under=0`` (also over a ``fail_under`` in coverage's configuration). The option exists
  only with pytest-cov loaded, so it is added only when the full run showed a threshold of pytest-cov's or the
  command gave one (the command's own is left out with ``--cov``).
- jest: ``--coverage=false``: jest checks ``coverageThreshold`` only when it collects coverage, and the last
  ``--coverage`` wins over an earlier one and over ``collectCoverage`` (jest 29 and 30).
- vitest: ``--coverage.enabled=false`` (vitest refuses the option given twice: the command's own is left out).
- ``coverage run`` checks no threshold (``coverage report --fail-under`` is a command of its own).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

PYTEST = "--cov-fail-under=0"
JEST = "--coverage=false"
VITEST = "--coverage.enabled=false"

# pytest-cov's threshold line (printed whenever a threshold is set, reached or not) and its error line.
_PYTEST_COV_THRESHOLD = re.compile(rb"Required test coverage of \d|Coverage failure: total of ")
_READ = 1 << 20
_OVERLAP = 256


def pytest_threshold(log_path: Path, dropped: Sequence[str]) -> bool:
    """A pytest gate with a pytest-cov threshold: given in its command (``dropped``) or shown by its full run."""
    return any(d.startswith("--cov-fail-under") for d in dropped) or _found(_PYTEST_COV_THRESHOLD, log_path)


def note(gate: str, flag: str) -> str:
    """What the model is told with a fast round's result."""
    return (f"Coverage thresholds are off in the fast rerun of gate {gate} ({flag}): a few tests cover less than "
            "the suite; the full gate checks them.")


def _found(pattern: re.Pattern[bytes], log_path: Path) -> bool:
    """``pattern`` in a log of any size, read in blocks (a match across two blocks is found too)."""
    try:
        handle = log_path.open("rb")
    except OSError:
        return False
    with handle:
        tail = b""
        while data := handle.read(_READ):
            if pattern.search(tail + data):
                return True
            tail = data[-_OVERLAP:]
    return False
