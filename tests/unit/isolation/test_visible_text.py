"""Issue 24 item 9: text a person reads (``show``, summary.md, reports, console lines) shows bidi controls and
other hidden characters as ``<U+XXXX>`` instead of letting them reorder what is displayed (Trojan Source)."""

from __future__ import annotations

import io
import sys
import unicodedata
from pathlib import Path

import pytest
from rich.console import Console

from prime_ci.artifacts.report import summary_markdown
from prime_ci.cli.app import say
from prime_ci.isolation.untrusted import visible
from prime_ci.session.log import SessionLog
from prime_ci.session.show import render

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f",
        "\u061c"]


def test_every_format_character_is_shown() -> None:
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char) == "Cf":
            assert visible(f"a{char}b") == f"a<U+{code:04X}>b"
    for char in [*BIDI, "\u200b", "\xad", "\ufeff", "\u2028", "\x1b", "\x07", "\x9b", "\U000e0041"]:
        assert char not in visible(f"x{char}y")


def test_plain_text_is_left_alone() -> None:
    text = "naïve café — 日本語 ✅ tab\there\nnew line [bold]x[/]"
    assert visible(text) is text
    shown = visible("if access_level != \"user\u202e \u2066// admin\u2069 \u2066\":")
    assert shown == 'if access_level != "user<U+202E> <U+2066>// admin<U+2069> <U+2066>":'
    assert visible(shown) == shown


def test_show_renders_bidi_controls_visibly(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    log = SessionLog.create(path, cwd="/work")
    log.message("assistant", [{"type": "text", "text": "looks \u202eesrever\u202c fine"},
                              {"type": "toolCall", "id": "c1", "name": "ipython",
                               "arguments": {"code": "x = 1 # \u2067 hidden \u2069"}}])
    log.message("toolResult", [{"type": "text", "text": "out\u200bput"}], toolCallId="c1", toolName="ipython",
                isError=False)
    log.close()
    console = Console(file=io.StringIO(), width=200, color_system=None)
    render(path, console)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    for char in ("\u202e", "\u202c", "\u2067", "\u2069", "\u200b"):
        assert char not in out
    assert "<U+202E>esrever<U+202C>" in out and "<U+2067> hidden <U+2069>" in out and "out<U+200B>put" in out


def test_summary_and_console_lines_show_them() -> None:
    result = {"success": False, "stop_reason": "max_turns", "exit_code": 3, "task": "fix \u202eit",
              "model": "openai/x", "base_commit": "0" * 40, "wall_s": 1.0,
              "usage": {"turns": 1, "total_tokens": 10, "cost_usd": None},
              "budgets": {"max_turns": 1, "max_tokens": 100, "max_wall_s": 60.0},
              "gates": [{"name": "py\u2066test", "passed": False, "exit_code": 1, "duration_s": 0.1, "attempts": 1}],
              "changed_files": ["src/\u202ecod.py"]}
    md = summary_markdown(result)
    assert "\u202e" not in md and "\u2066" not in md
    assert "fix <U+202E>it" in md and "py<U+2066>test" in md and "src/<U+202E>cod.py" in md


def test_say_shows_them(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    say("gate py\u202etset: FAIL \x1b]0;title\x07")
    err = capsys.readouterr().err
    assert err == "prime-ci: gate py<U+202E>tset: FAIL <U+001B>]0;title<U+0007>\n"
