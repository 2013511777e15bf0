"""Issue 37: a registered secret printed split — spaces, newlines or any run of up to three other characters
between its letters, as a committed conftest prints it — is masked like the secret itself."""

from __future__ import annotations

import uuid

import pytest

from prime_ci.isolation import redact
from prime_ci.isolation.redact import MASK


@pytest.fixture(scope="module")
def secret() -> str:
    value = f"sk-split-{uuid.uuid4().hex[:20]}"
    redact.register(value)
    return value


@pytest.mark.parametrize("gap", [" ", "\n", "\r\n", "  ", "' '", '" +', "-", "_.", "\t"])
def test_each_separator_form_is_masked(secret: str, gap: str) -> None:
    letters = [c for c in secret if c.isalnum()]
    split = gap.join(letters)
    assert redact.redact(f"before {split} after") == f"before {MASK} after", repr(gap)
    assert redact.contains_secret(split)


def test_a_secret_cut_in_two_lines_or_two_string_literals_is_masked(secret: str) -> None:
    half = len(secret) // 2
    assert MASK in redact.redact(f"x = '{secret[:half]}' '{secret[half:]}'")
    assert MASK in redact.redact(f"{secret[:half]}\n{secret[half:]}")


def test_wider_gaps_and_other_text_are_left_alone(secret: str) -> None:
    letters = [c for c in secret if c.isalnum()]
    wide = "....".join(letters)  # four characters between: not covered (say so in the README)
    assert redact.redact(wide) == wide
    assert redact.redact("an ordinary line of test output, 12 passed") == "an ordinary line of test output, 12 passed"
