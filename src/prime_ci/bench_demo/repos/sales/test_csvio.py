from decimal import Decimal

from csvio import Sale, parse_sales

EXPORT = "date,region,amount\n2026-03-01, North ,19.99\n2026-03-01,south,5.50\n\n"


def test_amounts_keep_their_cents() -> None:
    assert [s.amount for s in parse_sales(EXPORT)] == [Decimal("19.99"), Decimal("5.50")]


def test_regions_are_normalised() -> None:
    assert [s.region for s in parse_sales(EXPORT)] == ["north", "south"]


def test_header_only_export_is_empty() -> None:
    assert parse_sales("date,region,amount\n") == []


def test_sale_fields() -> None:
    assert parse_sales(EXPORT)[1] == Sale("2026-03-01", "south", Decimal("5.50"))
