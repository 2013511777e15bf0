"""The per-region summary mailed every morning."""

from __future__ import annotations

from csvio import parse_sales
from stats import average_sale, top_regions


def render(export: str, n: int = 3) -> str:
    sales = parse_sales(export)
    lines = [f"{len(sales)} sales, average {average_sale(sales)}"]
    lines += [f"{rank}. {region}: {total}" for rank, (region, total) in enumerate(top_regions(sales, n), start=1)]
    return "\n".join(lines)
