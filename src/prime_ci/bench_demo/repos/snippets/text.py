"""Text helpers for notification previews."""

from __future__ import annotations

ELLIPSIS = "..."


def truncate(text: str, width: int) -> str:
    """`text` shortened to fit a preview box `width` characters wide, marked with '...' where it was cut."""
    return text[:width] + ELLIPSIS


def initials(name: str) -> str:
    """'Ada King Lovelace' -> 'AKL' (at most three letters)."""
    return "".join(part[0].upper() for part in name.split())[:3]


def preview(sender: str, body: str, width: int = 40) -> str:
    """One line for the lock screen: the sender's initials, then as much of the body as fits."""
    prefix = f"[{initials(sender)}] "
    return prefix + truncate(" ".join(body.split()), width - len(prefix))
