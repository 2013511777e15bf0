"""Durations: parsing ``90s``, ``20m``, ``1h30m``, ``1.5h`` or plain seconds, and printing them that way."""

from __future__ import annotations

import re

from prime_ci.errors import ConfigError

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(value: str | int | float, *, what: str = "duration") -> float:
    """Return seconds (> 0); raise ConfigError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{what}: expected a duration like 90s, 20m or 1h30m, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
                raise ConfigError(
                    f"{what}: expected a duration like 90s, 20m or 1h30m, got {value!r}"
                ) from None
            seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ConfigError(f"{what}: must be a positive duration, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` as ``--max-wall`` takes it, the one way prime-ci prints a duration: ``1h30m``, ``2m5s``, ``45s``;
    under a minute to a tenth of a second (``1.5s``)."""
    tenths = round(seconds, 1)
    if tenths < 60 and tenths != int(tenths):
        return f"{tenths:.1f}s"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{sec}s" if sec or not (h or m) else "")
    return out
