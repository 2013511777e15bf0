import pytest
from pages import page, page_count, page_links


def test_page_count_exact_multiple() -> None:
    assert page_count(10, 5) == 2


def test_page_count_partial_last_page() -> None:
    assert page_count(11, 5) == 3
    assert page_count(1, 25) == 1


def test_page_count_empty_list_has_one_page() -> None:
    assert page_count(0, 5) == 1


def test_page_count_rejects_zero_per_page() -> None:
    with pytest.raises(ValueError):
        page_count(3, 0)


def test_page_items() -> None:
    items = list(range(11))
    assert page(items, 1, 5) == [0, 1, 2, 3, 4]
    assert page(items, 3, 5) == [10]
    assert page(items, 4, 5) == []


def test_links_on_the_last_partial_page() -> None:
    assert page_links(11, 2, 5) == {"first": 1, "prev": 1, "next": 3, "last": 3}
    assert page_links(11, 3, 5) == {"first": 1, "prev": 2, "next": None, "last": 3}
