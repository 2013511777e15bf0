"""Issue 26, live progress (console side): the status line on a terminal, heartbeats elsewhere, lines intact."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import termios
import time

import pytest

from prime_ci.cli import status as status_mod
from prime_ci.cli.app import say
from prime_ci.cli.status import HEARTBEAT_S, StatusLine, for_run, heartbeat_text, live_text
from prime_ci.engine.progress import TICK_S, Status

CALL = Status("model call", 32.4, 3, 40, 12_345, 2_000_000, 0.0123, 1.0, 65.0, 1800.0)


def screen(text: str) -> list[str]:
    """What a terminal shows after ``text``: printable characters, ``\\r``, ``\\n`` and erase-line."""
    lines, col, i = [""], 0, 0
    while i < len(text):
        if text.startswith("\x1b[2K", i):
            lines[-1], i = "", i + 4
            continue
        ch = text[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("")
            col = 0
        else:
            line = lines[-1].ljust(col)
            lines[-1] = line[:col] + ch + line[col + 1:]
            col += 1
        i += 1
    return lines


def test_the_status_line_says_phase_turn_tokens_cost_and_wall_against_their_budgets() -> None:
    assert live_text(CALL) == "» model call 32s · turn 3/40 · 12.3k/2M tokens · $0.01/$1.00 · wall 1m5s/30m"
    unpriced = Status("gate unit", 4.0, 1, 40, 0, 2_000_000, None, None, 5.0, 600.0)
    assert live_text(unpriced) == "» gate unit 4s · turn 1/40 · 0/2M tokens · cost unknown · wall 5s/10m"
    assert heartbeat_text(CALL).startswith("… waiting for the model (32s) · turn 3/40 · ")
    nested = Status("compaction › model call", 3.0, 0, 40, 0, 10, 0.0, None, 1.0, 9.0)
    assert heartbeat_text(nested).startswith("… waiting for the model (compaction, 3s) · ")


def test_lines_printed_while_the_status_line_is_drawn_stay_whole_and_the_line_comes_back_below() -> None:
    out = io.StringIO()
    line = StatusLine(out, live=True)
    line.update(CALL)
    with line.above():
        out.write("prime-ci: turn 3: ipython (1 lines) -> ok\n")
    line.update(CALL)
    with line.above():
        out.write("prime-ci: gate unit: pass\n")
    assert screen(out.getvalue()) == ["prime-ci: turn 3: ipython (1 lines) -> ok", "prime-ci: gate unit: pass",
                                      live_text(CALL)]
    line.close()
    assert screen(out.getvalue())[-1] == ""  # nothing of it stays once the run's work is over


def test_a_long_status_line_is_cut_to_the_terminal_width_so_it_can_be_erased_whole() -> None:
    master, worker = os.openpty()
    fcntl.ioctl(worker, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    with open(worker, "w", encoding="utf-8") as tty:
        line = StatusLine(tty, live=True)
        line.update(CALL)
        assert len(line.drawn) < 40 and line.drawn.endswith("…")
    os.close(master)


def test_heartbeats_name_what_the_run_waits_for_only_after_a_quiet_spell() -> None:
    assert HEARTBEAT_S + TICK_S <= 15  # never silent longer than that in a log
    out = io.StringIO()
    line = StatusLine(out, live=False, heartbeat_s=10.0)
    line.update(CALL)
    assert out.getvalue() == ""  # something was just printed (the line started)
    line.quiet_since = time.monotonic() - 10.0
    line.update(CALL)
    assert out.getvalue() == f"prime-ci: {heartbeat_text(CALL)}\n"
    line.update(CALL)
    line.quiet_since = time.monotonic() - 10.0
    with line.above():
        out.write("prime-ci: a line of the run\n")
    line.update(CALL)  # a printed line is not silence
    assert out.getvalue().count("waiting for") == 1
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


@pytest.mark.parametrize(("var", "value", "live"), [
    ("TERM", "xterm", True), ("GITHUB_ACTIONS", "true", False), ("TERM", "dumb", False)])
def test_the_live_line_is_only_for_a_terminal_a_person_watches(monkeypatch: pytest.MonkeyPatch, var: str,
                                                                value: str, live: bool) -> None:
    monkeypatch.setattr(status_mod, "_current", None)  # put back after the test
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv(var, value)
    master, worker = os.openpty()
    with open(worker, "w", encoding="utf-8") as tty:
        monkeypatch.setattr("sys.stderr", tty)  # here: pytest's capture sets sys.stderr again between phases
        assert for_run().live is live
        monkeypatch.undo()
    os.close(master)


def test_say_goes_above_the_runs_status_line(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    line = StatusLine(out, live=True)
    monkeypatch.setattr(status_mod, "_current", line)
    line.update(CALL)
    say("kernel ready")
    assert screen(out.getvalue()) == ["prime-ci: kernel ready", live_text(CALL)]


def test_the_heartbeat_knob_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_mod, "_current", None)  # put back after the test
    monkeypatch.setenv("PRIME_CI_HEARTBEAT_S", "2s")
    assert for_run().heartbeat_s == 2.0
    monkeypatch.delenv("PRIME_CI_HEARTBEAT_S")
    assert for_run().heartbeat_s == HEARTBEAT_S
