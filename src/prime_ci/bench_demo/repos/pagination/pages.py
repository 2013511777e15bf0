"""Pagination helpers for the list endpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def page_count(total: int, per_page: int) -> int:
    """Pages needed to show `total` items, `per_page` at a time (an empty list still has one page)."""
    if per_page <= 0:
        raise ValueError("per_page must be positive")
    return max(1, total // per_page)


def page(items: Sequence[T], number: int, per_page: int) -> list[T]:
    """The items on page `number` (1-based); an empty list past the last page."""
    if number < 1:
        raise ValueError("pages are numbered from 1")
    start = (number - 1) * per_page
    return list(items[start : start + per_page])


def page_links(total: int, current: int, per_page: int) -> dict[str, int | None]:
    """Page numbers for the response's `links` object: prev and next are None at either end."""
    last = page_count(total, per_page)
    return {
        "first": 1,
        "prev": current - 1 if current > 1 else None,
        "next": current + 1 if current < last else None,
        "last": last,
    }
