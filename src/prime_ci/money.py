"""Dollar figures, one format wherever prime-ci prints one: ``$0.01`` and up to two places (``$0.50``,
``$1,234.00``), below a cent four significant digits (``$0.002976``, ``$0.0097``), never rounded to ``$0.00``."""

from __future__ import annotations

import math


def usd(value: float) -> str:
    """``value`` dollars as a person reads them (a negative amount keeps its sign in front: ``-$0.50``)."""
    if value < 0:
        return "-" + usd(-value)
    if value == 0:
        return "$0.00"
    # four significant digits, as a fixed-point number (never 1e-05)
    places = 3 - math.floor(math.log10(value))
    small = round(value, places)
    if small < 0.01:
        return f"${small:.{places}f}".rstrip("0")
    return f"${value:,.2f}"


def usd_or_unknown(value: float | None) -> str:
    return "unknown" if value is None else usd(value)
