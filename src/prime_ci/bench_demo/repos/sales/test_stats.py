from decimal import Decimal

from csvio import Sale
from stats import average_sale, top_regions, total_by_region

SALES = [
    Sale("2026-03-01", "north", Decimal("10.00")),
    Sale("2026-03-01", "south", Decimal("4.00")),
    Sale("2026-03-02", "north", Decimal("2.50")),
    Sale("2026-03-02", "east", Decimal("7.25")),
    Sale("2026-03-02", "south", Decimal("4.00")),
]


def test_total_by_region_sums_every_sale() -> None:
    assert total_by_region(SALES) == {"north": Decimal("12.50"), "south": Decimal("8.00"), "east": Decimal("7.25")}


def test_top_regions_highest_first() -> None:
    assert top_regions(SALES, 2) == [("north", Decimal("12.50")), ("south", Decimal("8.00"))]


def test_average_sale() -> None:
    assert average_sale(SALES) == Decimal("5.55")
    assert average_sale([]) == Decimal(0)
