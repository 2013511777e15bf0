"""The guard on stdout and stderr in a GitHub Actions log (issue 37): whatever writes to them and however the text
is cut into writes, what reaches the log is ``neutral``; prime-ci's own commands pass whole, from a line start."""

from __future__ import annotations

import io
import json
import logging
import random
import sys
import traceback

import click
import pytest

from actions_runner import commands
from prime_ci.cli import actions_stream
from prime_ci.cli.actions_stream import GuardedStream, guard, json_for_stdout, write_command
from prime_ci.isolation.workflow_commands import neutral

FORGED = "x\n::add-mask::A ##[add-mask]B\r::set-output name=o::C\u2028::add-mask::D"


def test_text_cut_anywhere_comes_out_neutral() -> None:
    rng = random.Random(37)
    alphabet = [":", "#", "[", "\n", "\u200b", "add-mask", " "]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40)))
        raw = io.StringIO()
        stream = GuardedStream(raw)
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randrange(1, 6))))
        for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
            stream.write(text[a:b])
        assert raw.getvalue() == neutral(text), repr(text)


def test_own_commands_pass_whole_from_a_line_start() -> None:
    raw = io.StringIO()
    stream = GuardedStream(raw)
    stream.write("half a line :")
    stream.command("::group::t\n::endgroup::")
    stream.write(":x\n")
    assert raw.getvalue() == "half a line :\n::group::t\n::endgroup::\n:x\n"
    assert [c.name for c in commands(raw.getvalue())] == ["group", "endgroup"]


def guarded(monkeypatch: pytest.MonkeyPatch) -> tuple[io.StringIO, io.StringIO]:
    """stdout and stderr as StringIOs behind the guard (in the test itself: pytest swaps them between phases)."""
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    guard()
    guard()  # once
    assert isinstance(sys.stdout, GuardedStream) and sys.stdout.raw is out
    assert isinstance(sys.stderr, GuardedStream) and sys.stderr.raw is err
    return out, err


def test_every_writer_goes_through_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = guarded(monkeypatch)
    from rich.console import Console

    click.echo(FORGED)
    click.echo(FORGED, err=True)
    print(FORGED)
    Console(stderr=True, highlight=False).print(FORGED, markup=False)
    logging.StreamHandler().emit(logging.makeLogRecord({"msg": FORGED}))  # a library's log line
    try:
        raise RuntimeError(FORGED)
    except RuntimeError:
        traceback.print_exc()
    write_command("::notice::own")
    assert out.getvalue().count("A ## [add-mask]B") == 2 and err.getvalue().count("A ## [add-mask]B") >= 4
    assert [c.name for c in commands(out.getvalue())] == ["notice"]
    assert commands(err.getvalue()) == []


def test_outside_actions_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    guard()
    assert sys.stdout is out
    write_command("::group::x")
    assert out.getvalue() == "::group::x\n"
    assert json_for_stdout('{"a": "::b"}') == '{"a": "::b"}'


def test_json_on_stdout_is_the_same_document(monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = guarded(monkeypatch)
    doc = {"detail": FORGED, "test": "tests/a.py::t"}
    click.echo(json_for_stdout(json.dumps(doc, indent=2)))
    assert json.loads(out.getvalue()) == doc and commands(out.getvalue()) == []
    assert actions_stream.in_actions()
