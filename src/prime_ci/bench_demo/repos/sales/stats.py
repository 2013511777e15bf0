"""Aggregates over parsed sales."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from csvio import Sale


def total_by_region(sales: Iterable[Sale]) -> dict[str, Decimal]:
    """Sum of the amounts per region."""
    totals: dict[str, Decimal] = {}
    for sale in sales:
        totals[sale.region] = sale.amount
    return totals


def top_regions(sales: Iterable[Sale], n: int = 3) -> list[tuple[str, Decimal]]:
    """The `n` regions with the highest totals, highest first."""
    totals = total_by_region(sales)
    return sorted(totals.items(), key=lambda item: item[1])[:n]


def average_sale(sales: Iterable[Sale]) -> Decimal:
    amounts = [sale.amount for sale in sales]
    if not amounts:
        return Decimal(0)
    return (sum(amounts, Decimal(0)) / len(amounts)).quantize(Decimal("0.01"))
