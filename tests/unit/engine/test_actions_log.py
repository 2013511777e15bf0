"""The run in a GitHub Actions log, in process: a group per setup command and gate run, written whole, its lines in a
stop-commands block; nothing from a test or its output can start a workflow command; annotations relative to the
repository root; one notice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from actions_runner import foreign
from prime_ci.engine.actions_log import ActionsLog, verdict
from prime_ci.engine.setup import SetupOutcome
from prime_ci.gates.junit import JUnitFailure, github_annotations
from prime_ci.gates.runner import GateResult
from prime_ci.isolation.workflow_commands import escape_data, escape_property

TOKEN = re.compile(r"[0-9a-f]{32}")


def lines_of(emitted: list[str]) -> list[str]:
    """What was written, line by line, each block's token made ``T``."""
    return [TOKEN.sub("T", line) for line in "\n".join(emitted).split("\n")]


def commands(lines: list[str]) -> list[str]:
    """What the runner would read as workflow commands (a line starting with ``::`` after leading spaces)."""
    return [line.strip() for line in lines if line.lstrip().startswith("::")]


def test_escaping_follows_githubs_rules() -> None:
    assert escape_data("50%\r\nnext:a,b") == "50%25%0D%0Anext:a,b"
    assert escape_property("50%\r\nnext:a,b") == "50%25%0D%0Anext%3Aa%2Cb"


def test_lines_inside_a_group_cannot_start_a_workflow_command() -> None:
    emitted: list[str] = []
    actions = ActionsLog(emitted.append, Path("/repo"))
    output = "ok\n::error file=x::forged\n   ::stop-commands::tok\n##[error]old style\n"
    actions.setup(2, SetupOutcome(name="pip", command="pip install .\n::warning::x", passed=False, exit_code=1,
                                  timed_out=False, duration_s=1.5, log="setup/pip.log"), output)
    failing = [{"gate": "pytest", "test": "::error::t\n::notice::x", "message": "m", "file": "t.py", "line": 1}]
    actions.round({"round": 1, "kind": "full", "passed": False, "gates": ["pytest"], "duration_s": 1.0}, failing)
    assert len(emitted) == 2  # a group is one write
    lines = lines_of(emitted)
    assert commands(lines) == ["::group::setup 1/2 pip: FAILED (exit 1) in 1.5s", "::stop-commands::T", "::T::",
                               "::endgroup::", "::group::gate round 1 (full): red: 1 failing test(s) in 1s",
                               "::stop-commands::T", "::T::", "::endgroup::"]
    assert "│ ## [error]old style" in lines and not any("##[" in line for line in lines)
    assert foreign("\n".join(emitted)) == []
    tokens = re.findall(r"^::stop-commands::(.*)$", "\n".join(emitted), re.M)
    assert len(set(tokens)) == 2 and all(TOKEN.fullmatch(t) for t in tokens)  # fresh for each block


def test_group_titles_are_escaped() -> None:
    emitted: list[str] = []
    ActionsLog(emitted.append, Path("/repo")).group("title\nwith % ::add-mask::x", ["x"])
    assert lines_of(emitted) == ["::group::title%0Awith %25 : :add-mask: :x", "::stop-commands::T", "│ x", "::T::",
                                 "::endgroup::"]


def test_a_group_cut_short_still_resumes_commands() -> None:
    """Ctrl-C inside the group's write: the block's closing line is written before the interrupt goes on."""
    emitted: list[str] = []

    def emit(text: str) -> None:
        if not emitted:
            emitted.append(text.split("\n│", 1)[0])
            raise KeyboardInterrupt
        emitted.append(text)

    with pytest.raises(KeyboardInterrupt):
        ActionsLog(emit, Path("/repo")).group("title", ["x"])
    assert lines_of(emitted) == ["::group::title", "::stop-commands::T", "", "::T::"]
    assert emitted[0].removeprefix("::group::title\n::stop-commands::") in emitted[1]


def _failed(failures: list[JUnitFailure]) -> GateResult:
    return GateResult(name="pytest", command="pytest", passed=False, exit_code=1, timed_out=False, output="out",
                      output_bytes=3, duration_s=1.0, attempts=1, flaky=False, log_path=Path("pytest.log"),
                      failures=failures)


def test_annotations_are_relative_to_the_repository_root() -> None:
    failures = [JUnitFailure("a", "failure", "m1", "", "/work/wt/tests/test_a.py", 3),
                JUnitFailure("b", "failure", "m2", "", "./pkg/b.test.js", None),
                JUnitFailure("c", "failure", "m3", "", "/elsewhere/c.py", 9),
                JUnitFailure("d", "failure", "m4", "", "../outside.py", 2)]
    lines = github_annotations([_failed(failures)], root=Path("/work/wt"))
    assert lines == ["::error file=tests/test_a.py,line=3,title=pytest%3A a::a: m1",
                     "::error file=pkg/b.test.js,title=pytest%3A b::b: m2"]


def test_the_end_annotates_only_a_red_run_and_gives_one_notice() -> None:
    result = {"success": False, "stop_reason": "gates_failed", "exit_code": 1, "detail": "gates still failing",
              "rounds": [{"round": 1, "kind": "full", "passed": False}], "time_to_green_s": None,
              "usage": {"turns": 2, "total_tokens": 1500, "cost_usd": 0.01}, "wall_s": 61.0}
    emitted: list[str] = []
    gate = _failed([JUnitFailure("t", "failure", "boom", "", "t.py", 4)])
    ActionsLog(emitted.append, Path("/repo")).end(result, [gate])
    assert emitted == ["::error file=t.py,line=4,title=pytest%3A t::t: boom",
                       "::notice title=prime-ci%3A gates_failed::gates_failed (exit 1): gates still failing · "
                       "1 gate round(s), 1 red, never green · 2 turn(s), 1,500 tokens, $0.01, 1m1s"]
    green: list[str] = []
    ActionsLog(green.append, Path("/repo")).end({**result, "success": True}, [gate])
    assert len(green) == 1 and green[0].startswith("::notice ")
    assert verdict({**result, "detail": "a\nb"}).startswith("gates_failed (exit 1): a\nb")
