from text import initials, preview, truncate


def test_truncate_long_text_fits_the_width() -> None:
    assert truncate("The quick brown fox jumps over the lazy dog", 12) == "The quick..."


def test_initials() -> None:
    assert initials("Ada King Lovelace") == "AKL"
    assert initials("grace  hopper") == "GH"


def test_preview_of_a_long_message() -> None:
    line = preview("Grace Hopper", "The build is broken again,   please take a look when you can", 33)
    assert line == "[GH] The build is broken again..."
    assert len(line) == 33
