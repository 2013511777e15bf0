from report import render

EXPORT = """date,region,amount
2026-03-01,North,120.40
2026-03-01,South,80.10
2026-03-02,north,19.60
2026-03-02,East,99.90
2026-03-02,south,45.00
"""


def test_render_summary() -> None:
    assert render(EXPORT, 2) == "5 sales, average 73.00\n1. north: 140.00\n2. south: 125.10"
