"""``-v/--verbose``: the work on the console, bounded and redacted (DESIGN §14). Each cell's code, the head of its
output and the model's text, as lines for the run's ``say`` (which shows control and bidi characters instead of
obeying them, and in GitHub Actions keeps workflow commands out)."""

from __future__ import annotations

from prime_ci.isolation.redact import redact
from prime_ci.isolation.untrusted import clean_terminal_text

CODE_LINES, OUTPUT_LINES, TEXT_LINES = 40, 20, 20
MAX_LINE = 300


def _bounded(text: str, limit: int, prefix: str) -> list[str]:
    lines = clean_terminal_text(redact(text)).rstrip("\n").splitlines() or [""]
    shown = [prefix + (line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…") for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"{prefix}… {len(lines) - limit} more line(s)")
    return shown


def model_text(text: str) -> list[str]:
    """The model's text of one reply (nothing when it only called the tool)."""
    return _bounded(text, TEXT_LINES, "  model │ ") if text.strip() else []


def cell(code: str, output: str) -> list[str]:
    """A cell's code, then the head of what it printed."""
    return [*_bounded(code, CODE_LINES, "  code  │ "), *_bounded(output or "(no output)", OUTPUT_LINES, "  out   │ ")]
