"""Workflow-command text (issue 37): ``neutral`` leaves nothing the runner could read as a command however the text
is split into lines; prime-ci's own commands are one line whose quoted values are neutral; JSON stays the same
document; every stop-commands block gets a fresh token."""

from __future__ import annotations

import json
import random

import pytest

from actions_runner import commands
from prime_ci.isolation.workflow_commands import (
    command,
    escape_data,
    escape_property,
    inert_json,
    neutral,
    stop_commands,
)

FORGED = ["::add-mask::x", "  ::add-mask::x", "\t::set-output name=o::y", "a ##[add-mask]x", "###[add-mask]x",
          "a%0A::add-mask::x", "a\r::add-mask::x", "a\u2028::add-mask::x", "a\u2029##[add-mask]x", "a\x85::add-mask::x",
          "a\x0b::add-mask::x", ":\u200b:add-mask:\u200b:x", "#\u00ad#[add-mask]x", ":\x00:add-mask:\x1f:x",
          "\ufeff:\ufe0f:add-mask:\u00ad:x", ":::add-mask:::x",
          "\ufeff::add-mask::x", "::stop-commands::t", "::t::"]
# The pieces random text is made of: halves of commands, every line break, characters a comparison may skip.
ALPHABET = [":", ":", "#", "#", "[", "]", " ", "\t", "\n", "\r", "%0A", "%0D", "\u2028", "\u2029", "\x85", "\x0b",
            "\u200b", "\u00ad", "\ufe0f", "\x00", "add-mask", "a", "%", "\u3000"]


@pytest.mark.parametrize("text", FORGED)
def test_a_forged_command_is_none_after_neutral(text: str) -> None:
    assert commands(text), "the reader finds it before"
    assert commands(neutral(text)) == []


def test_random_text_holds_no_command_after_neutral() -> None:
    rng = random.Random(37)
    for _ in range(3000):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 30)))
        out = neutral(text)
        assert commands(out) == [], repr(text)
        assert neutral(out) == out, repr(text)  # idempotent
        assert out.replace(" ", "") == text.replace(" ", "")  # only spaces were added


def test_other_text_is_left_as_it_is() -> None:
    for text in ("tests/a.py: test_x", "a:b:c", "# heading [link]", "#[x]", "C# [1]", "", "50% %0A"):
        assert neutral(text) == text
    assert neutral("tests/a.py::test_x ##[x]") == "tests/a.py: :test_x ## [x]"


def test_an_own_command_is_one_line_and_quotes_only_neutral_text() -> None:
    line = command("error", "boom\r\n::add-mask::x ##[add-mask]y 100%", file="a,b.py", line=3,
                   title="pytest: t::x ##[add-mask]z", col=None)
    assert line == ("::error file=a%2Cb.py,line=3,title=pytest%3A t%3A%3Ax ## [add-mask]z::"
                    "boom%0D%0A: :add-mask: :x ## [add-mask]y 100%25")
    assert [(c.name, c.whole) for c in commands(line)] == [("error", True)]
    assert command("endgroup") == "::endgroup::"
    assert escape_data("50%\r\nnext:a,b") == "50%25%0D%0Anext:a,b"
    assert escape_property("50%\r\nnext:a,b") == "50%25%0D%0Anext%3Aa%2Cb"


def test_each_stop_commands_block_has_a_fresh_token() -> None:
    blocks = [stop_commands() for _ in range(20)]
    tokens = {stop.removeprefix("::stop-commands::") for stop, _ in blocks}
    assert len(tokens) == 20
    for stop, resume in blocks:
        token = stop.removeprefix("::stop-commands::")
        assert len(token) == 32 and int(token, 16) >= 0 and resume == f"::{token}::"


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_json_is_the_same_document_without_a_command(ensure_ascii: bool) -> None:
    rng = random.Random(3)
    values = ["::add-mask::x", ":::", "a\n::add-mask::x", "##[add-mask]x", "\\::", "\\\\##[", ":\u200b:x",
              "#\u200b#[x]", "tests/a.py::t", "".join(rng.choice(ALPHABET) for _ in range(400))]
    doc = {"detail": values, "::key::": {"##[k]": values[0]}, "n": 1, "s": ": :"}
    for indent in (None, 2):
        text = json.dumps(doc, indent=indent, ensure_ascii=ensure_ascii)
        out = inert_json(text)
        assert json.loads(out) == doc
        assert commands(out) == []
        assert "::" not in out and "##[" not in out
    assert inert_json('{"a": 1}') == '{"a": 1}'
