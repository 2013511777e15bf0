"""Issue 13: terminal colour and control sequences never reach the model, the session, the notebook or the
reviewer's terminal (`prime-ci show`)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import PRIME_CI, make_repo, run_prime
from prime_ci.isolation.untrusted import TerminalStream, clean_terminal_text
from prime_ci.kernel.output import CellOutput
from prime_ci.session.log import SessionLog
from prime_ci.session.show import render
from prime_ci.testing import ScriptedServer, ipython, reply

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # anything a terminal acts on but \t and \n
SGR = re.compile(r"\x1b\[[0-9;]*m")
FAILING = {
    "test_colours.py": "def test_colours():\n    assert 'expected-value' == 'actual-value'\n",
    ".gitignore": "__pycache__/\n.pytest_cache/\n.prime-ci/\n",
}
RED = r"""!python -c "print('\033[31mred\033[0m')" """
PYTEST = "!FORCE_COLOR=1 PY_COLORS=1 python -m pytest --color=yes -p no:cacheprovider test_colours.py"
RAW = (  # proves the pytest run above really printed colours: the kernel saw them and cleaned them
    "import os, subprocess, sys\n"
    "raw = subprocess.run([sys.executable, '-m', 'pytest', '--color=yes', '-p', 'no:cacheprovider', "
    "'test_colours.py'], capture_output=True, env={**os.environ, 'FORCE_COLOR': '1', 'PY_COLORS': '1'}).stdout\n"
    r"print('colour codes in the raw output:', b'\x1b[' in raw)"
)
SPLIT_AND_REDRAW = (  # each flush is its own iopub message: an escape sequence split between two of them
    "import sys\n"
    r"sys.stdout.write('\x1b[3'); sys.stdout.flush(); sys.stdout.write('1mSPLIT\x1b[0m\n'); sys.stdout.flush()" "\n"
    "for i in range(0, 101, 10):\n"
    r"    sys.stdout.write(f'\r\x1b[2Kprogress {i}%'); sys.stdout.flush()" "\n"
    "print()\n"
    r"sys.stderr.write('\x1b]0;window title\x07\x1b[2J\x9b1mplain stderr\r\n')"
)


def _no_escape(raw: bytes) -> None:
    """Neither a raw control byte nor a JSON escape of one (JSON writes ESC as \\u001b)."""
    assert b"\x1b" not in raw and b"\x07" not in raw and "\x9b".encode() not in raw
    escapes = re.findall(rb"(?<!\\)\\u00(?:[01][0-9a-f]|7f|[89][0-9a-f])", raw, re.IGNORECASE)
    assert not escapes, escapes[:5]


def test_cells_with_colour_reach_model_session_and_notebook_clean(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", FAILING)
    server.add(ipython(RED), ipython(PYTEST), ipython(RAW), ipython(SPLIT_AND_REDRAW), reply("done"))
    run = run_prime(tmp_path, repo, server)
    assert run.code == 0, run.proc.stderr

    messages = server.chat_requests[-1].body["messages"]
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert len(tools) == 4
    for text in tools:
        assert not CONTROL.search(text), repr(text[:500])
    red, pytest_out, raw, split = tools
    assert "red" in red and "31m" not in red
    assert "1 failed" in pytest_out and "AssertionError" in pytest_out and "actual-value" in pytest_out
    assert "colour codes in the raw output: True" in raw
    assert "SPLIT" in split and "31m" not in split and "1mSPLIT" not in split
    assert "progress 100%" in split and "progress 90%" not in split
    assert "plain stderr" in split and "window title" not in split
    _no_escape(json.dumps(server.chat_requests[-1].body["messages"]).encode())

    session = (run.out / "session.jsonl").read_bytes()
    _no_escape(session)
    assert b"1 failed" in session and b"progress 100%" in session
    notebook = (run.out / "cells.ipynb").read_bytes()
    _no_escape(notebook)
    outputs = [o for cell in json.loads(notebook)["cells"] for o in cell["outputs"]]
    stored = "".join(o.get("text", "") for o in outputs)
    assert "red\n" in stored and "1 failed" in stored and "progress 100%" in stored


def _hostile_session(path: Path) -> None:
    esc, osc = "\x1b", "\x1b]0;pwned-title\x07"
    entries: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": f"id{osc}", "timestamp": f"t{esc}[2J", "cwd": f"/w{esc}[?1049h"},
        {"type": "message", "message": {"role": "assistant", "content": [
            {"type": "text", "text": f"[bold]not bold[/bold] {esc}[31mred{esc}[0m [/tmp]"},
            {"type": "toolCall", "id": "c1", "name": f"ipython{osc}[red]",
             "arguments": {"code": f"print('[/tmp]'){esc}[2J\x9b31m"}}]}},
        {"type": "message", "message": {"role": "toolResult", "isError": True, "content": [
            {"type": "text", "text": f"[budget] {osc}{esc}[2J{esc}[?1049h\x9b2J\x90dcs{esc}\\ done [/tmp] \udcff"}]}},
        {"type": "custom_message", "customType": f"[red]note{esc}[2J",
         "content": f"see {esc}]8;;http://evil.example{esc}\\link{esc}]8;;{esc}\\ [/tmp]\x07"},
        {"type": "custom", "customType": f"prime_ci.gate{osc}",
         "data": {"failures": [{"text": f"{esc}[31mFAIL{esc}[0m"}], f"k{esc}[2J": "[/x]"}},
        {"type": "compaction", "summary": f"[/tmp] {esc}c{esc}[2J summary"},
        {"type": "message", "message": {"role": f"[/role]{esc}[2J", "content": "u\x07ser"}},
        {"type": f"odd{esc}[2J"},
        {"type": "custom", "customType": "prime_ci.stop",
         "data": {"stop_reason": f"completed{osc}", "exit_code": 0, "detail": f"[/tmp] {esc}[2J"}},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))  # ensure_ascii: ESC travels as \u001b


def test_show_writes_no_control_sequences_and_no_markup(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    _hostile_session(path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    proc = subprocess.run([PRIME_CI, "show", str(path)], cwd=tmp_path, env={**env, "COLUMNS": "120"},
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert b"\x1b" not in out and b"\x07" not in out and b"\x9b" not in out
    text = out.decode()
    assert not CONTROL.search(text), repr(CONTROL.search(text))
    assert "[/tmp]" in text and "[bold]not bold[/bold]" in text and "[budget]" in text and "[red]note" in text
    assert "red" in text and "FAIL" in text and "link" in text and "done" in text and "summary" in text
    assert "pwned-title" not in text and "evil.example" not in text
    assert "stop: completed (exit 0) [/tmp]" in text

    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=120)
    render(path, console)
    styled = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[" in styled, "rich styles a terminal's output"
    plain = SGR.sub("", styled)
    assert not CONTROL.search(plain), repr(plain)
    assert "[/tmp]" in plain and "pwned-title" not in plain


SAMPLE = ("\x1b[1m===== test session starts =====\x1b[0m\r\n"
          "collected 1 item\r\n\r\ntest_x.py \x1b[31mF\x1b[0m\x1b[31m [100%]\x1b[0m\r\n"
          "\x1b]0;title\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n"
          "\r\x1b[2K 10%|#  |\r\x1b[2K 50%|## |\r\x1b[2K100%|###|\n"
          "\x9b32mgreen\x9b0m \x1bPdcs\x1b\\ \x1b(Bcharset \x1b7saved\x1b8 bell\x07 back\x08space\ttab\n"
          "\x1b[31mE   assert 'expected' == 'actual'\x1b[0m\n\x1b[31m1 failed\x1b[0m in 0.01s\r\n")
EXPECTED = ("===== test session starts =====\ncollected 1 item\n\ntest_x.py F [100%]\nlink\n100%|###|\n"
            "green  charset saved bell backspace\ttab\nE   assert 'expected' == 'actual'\n1 failed in 0.01s\n")


def test_clean_terminal_text() -> None:
    assert clean_terminal_text(SAMPLE) == EXPECTED
    assert clean_terminal_text(EXPECTED) is EXPECTED, "clean text is returned as it is"
    assert clean_terminal_text("a\rb\r\nc\r") == "b\nc" and clean_terminal_text("x\r\r\n") == "x\n"
    assert clean_terminal_text("\x1b]0;never terminated\nnext") == "0;never terminated\nnext"
    assert clean_terminal_text("lone \x1b\nhalf \x1b[\nc1 \x9b") == "lone \nhalf \nc1 "
    big = "\x1b]" * 100_000 + "\x1b[" * 100_000 + "\r" * 100_000 + "x" * 1_000_000
    assert clean_terminal_text(big) == "x" * 1_000_000


@pytest.mark.parametrize("hold", [4096, 16])
def test_stream_split_anywhere_cleans_like_the_whole(hold: int) -> None:
    for i in range(len(SAMPLE) + 1):
        for j in range(i, len(SAMPLE) + 1, 7):
            stream = TerminalStream(hold)
            got = stream.feed(SAMPLE[:i]) + stream.feed(SAMPLE[i:j]) + stream.feed(SAMPLE[j:]) + stream.flush()
            assert not CONTROL.search(got), (i, j, got)
            if hold == 4096:  # lines fit the hold: exactly as if it had arrived at once
                assert got == EXPECTED, (i, j)
    stream = TerminalStream(hold)
    one_by_one = "".join(stream.feed(c) for c in SAMPLE) + stream.flush()
    assert not CONTROL.search(one_by_one) and (hold != 4096 or one_by_one == EXPECTED)


def test_cell_output_keeps_order_and_cleans_every_kind() -> None:
    cell = CellOutput(10_000)
    cell.collect("stream", {"name": "stdout", "text": "one \x1b[3"})
    cell.collect("stream", {"name": "stdout", "text": "1mred\x1b[0m\nhalf"})
    cell.collect("stream", {"name": "stderr", "text": "\x1b[33mwarn\x1b[0m\n"})
    cell.collect("execute_result", {"data": {"text/plain": "\x1b[1m42\x1b[0m"}, "execution_count": 1})
    error = cell.collect("error", {"ename": "E\x1b[0m", "evalue": "bad \x1b[1mvalue\x1b[0m",
                                   "traceback": ["\x1b[31m---\x1b[0m", "\x1b[1;31mE\x1b[0m: bad value"]})
    cell.note("\n[host note]")
    text = cell.out.text()
    assert text == "one red\nhalfwarn\n42\n---\nE: bad value\n\n[host note]"
    assert error == "E: bad value"
    assert [o["output_type"] for o in cell.outputs] == ["stream", "stream", "execute_result", "error"]
    _no_escape(json.dumps(cell.outputs).encode())


def test_session_writer_cleans_text_and_keeps_tool_call_arguments(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path / "session.jsonl", cwd="/w")
    code = "print('\x1b[31m')"  # a real ESC in the model's code: kept, it is what the model sent
    log.message("assistant", [{"type": "text", "text": "\x1b[1mbold\x1b[0m"},
                              {"type": "toolCall", "id": "c", "name": "ipython", "arguments": {"code": code}}])
    log.custom_message("agent_message", "child says \x1b[32mok\x1b[0m\r\n")
    log.custom("prime_ci.gate", {"results": [{"failures": [{"text": "\x1b[31mE assert\x1b[0m"}]}]})
    log.close()
    entries = [json.loads(line) for line in (tmp_path / "session.jsonl").read_text().splitlines()]
    assert entries[1]["message"]["content"][0]["text"] == "bold"
    assert entries[1]["message"]["content"][1]["arguments"]["code"] == code
    assert entries[2]["content"] == "child says ok\n"
    assert entries[3]["data"]["results"][0]["failures"][0]["text"] == "E assert"
