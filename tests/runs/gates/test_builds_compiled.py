"""Builds before every gate round: a real C extension built by a real compiler in a real worktree, the judge and the
agent loop with a scripted model whose cells run as real processes in the worktree."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from cext_project import BROKEN, BUILD, RIGHT, SHADOW, WRONG
from prime_ci.engine.environment import Standalone, standalone
from prime_ci.engine.resume import rebuild
from prime_ci.gates import protect
from prime_ci.gates.specs import collect_builds, gates_from_commands
from prime_ci.isolation.worktree import Worktree
from prime_ci.kernel.client import CellResult
from prime_ci.session.read import read_session
from prime_ci.testing.fakes import FakeExecutor, ScriptedModel, cell, text_reply, tool_reply
from unit.gates.build_rounds import drive, feedback, judge_for, worktree

BUILD_RE = "running build_ext"


def cells_in(wt: Worktree) -> FakeExecutor:
    """The model's cells, each run by the real interpreter in the worktree (as the kernel would)."""

    def execute(code: str) -> CellResult:
        proc = subprocess.run([sys.executable, "-c", code], cwd=wt.path, capture_output=True, text=True, timeout=300)
        return cell(proc.stdout + proc.stderr, "ok" if proc.returncode == 0 else "error")

    return FakeExecutor(execute)


def test_a_c_fix_is_built_before_each_round_and_only_the_source_is_in_the_patch(tmp_path: Path) -> None:
    wt = worktree(tmp_path)
    judge = judge_for(tmp_path, wt)
    model = ScriptedModel([tool_reply(BROKEN), text_reply("fixed"), tool_reply(WRONG), text_reply("fixed"),
                           tool_reply(RIGHT), text_reply("fixed")])
    stop = drive(judge, model, cells_in(wt))
    assert stop.reason == "completed", stop

    first = feedback(model, 2)  # after the C that does not compile: the build's log, no gate ran
    assert "Gate round 1: build failed" in first and "## build: setup.py (exit 1)" in first, first
    assert "error:" in first and "Full log: build/setup.py.log" in first
    second = feedback(model, 4)  # after the wrong fix: it built, and the tests ran against the new module
    assert "Gate round 2: failed" in second and "assert 1 == 5" in second, second
    assert "The builds ran first (setup.py: ok)" in second
    assert [(r["kind"], r["passed"]) for r in judge.round_log] == [
        ("build", False), ("full", False), ("fast", True), ("full", True)]

    patch, changed = wt.diff()
    assert changed == ["fastcalc/_calc.c"] and "+    return PyLong_FromLong(a + b);" in patch
    assert ".so" not in patch and "build/" not in patch
    assert judge.builds is not None and judge.builds.hidden() == [], "the rebuilt module is the build's output"
    assert [(o.name, o.passed) for o in judge.builds.last] == [("setup.py", True)]
    assert BUILD_RE in (tmp_path / "out" / "build" / "setup.py.log").read_text()
    state = rebuild(read_session(tmp_path / "out" / "session.jsonl"))
    assert (state.gate_rounds, state.failed_rounds) == (3, 2), "a resumed run counts the failed build's round"


def test_a_module_the_model_built_by_hand_is_replaced_by_the_builds(tmp_path: Path) -> None:
    # setuptools skips an extension that is newer than its sources: the model's own build would stand unless the
    # build step sets it aside and builds again
    wt = worktree(tmp_path)
    judge = judge_for(tmp_path, wt, gate="python -c 'from fastcalc import add; assert add(2, 3) == 5'")
    by_hand = RIGHT + f"import subprocess, sys\nsubprocess.run([sys.executable] + {BUILD.split()[1:]!r}, check=True)\n"
    model = ScriptedModel([tool_reply(by_hand), text_reply("fixed and rebuilt")])
    stop = drive(judge, model, cells_in(wt))
    assert stop.reason == "completed", stop
    assert judge.builds is not None and judge.builds.hidden() == []
    assert not (wt.root / "build-aside").exists()
    assert wt.diff()[1] == ["fastcalc/_calc.c"]


def test_a_module_the_model_plants_is_still_a_hidden_change(tmp_path: Path) -> None:
    wt = worktree(tmp_path)
    judge = judge_for(tmp_path, wt)
    model = ScriptedModel([tool_reply(SHADOW), text_reply("fixed")])
    stop = drive(judge, model, cells_in(wt))
    assert stop.reason == "completed", "the shadow makes the tests pass: only the verdict can catch it"
    assert judge.builds is not None and judge.builds.hidden() == ["tests/fastcalc.py"]
    assert (wt.path / "tests" / "fastcalc.py").is_file(), "put back after the build step, as the model left it"
    verdict = protect.check(wt, wt.diff()[1], [], [], judge.builds.hidden())
    assert verdict.protected == ["tests/fastcalc.py (hidden from the patch by .gitignore)"]


def test_prime_ci_gates_runs_the_builds_first_and_no_gate_after_a_failed_one(tmp_path: Path) -> None:
    wt = worktree(tmp_path)
    options = Standalone(sandbox="off", python=sys.executable, builds=collect_builds([BUILD], []))
    check = gates_from_commands(["python -c 'from fastcalc import add; assert add(2, 3) == -1'"])
    [gate] = asyncio.run(standalone(check, wt.path, tmp_path / "logs" / "gates", options, print))
    assert gate.passed and gate.name == "python", "built first, so the gate imported the (buggy) module"
    (wt.path / "fastcalc" / "_calc.c").write_text("not C\n")
    [broken] = asyncio.run(standalone(check, wt.path, tmp_path / "logs" / "gates", options, print))
    assert (broken.name, broken.passed) == ("build: setup.py", False)
    assert broken.log_path == tmp_path / "logs" / "build" / "setup.py.log"
