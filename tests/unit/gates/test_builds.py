"""Builds before every gate round, in process: a real C extension built by a real compiler in a real worktree, the
judge and the agent loop with a scripted model whose cells run as real processes in the worktree."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cext_project import BROKEN, BUILD, FILES, GATE, RIGHT, SHADOW, WRONG
from conftest import make_repo
from prime_ci.cli.schema_registry import schemas
from prime_ci.engine.environment import Standalone, standalone
from prime_ci.engine.resume import rebuild
from prime_ci.errors import ConfigError
from prime_ci.gates import protect
from prime_ci.gates.builds import Builder
from prime_ci.gates.judge import Judge
from prime_ci.gates.specs import builds_from_texts, collect_builds, gates_from_commands, load_gate_files
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.isolation.worktree import Worktree, create_worktree
from prime_ci.kernel.client import CellResult
from prime_ci.loop.agent import Agent, Stop
from prime_ci.loop.budget import Budget, Limits
from prime_ci.session.log import SessionLog
from prime_ci.session.read import read_session
from prime_ci.testing.fakes import FakeExecutor, ScriptedModel, cell, text_reply, tool_reply

BUILD_RE = "running build_ext"


def worktree(tmp_path: Path, files: dict[str, str] = FILES) -> Worktree:
    repo = make_repo(tmp_path / "repo", files)
    wt = create_worktree(str(repo), None, parent=tmp_path)
    wt.excludes = [".prime-ci"]
    return wt


def gate_env(tmp_path: Path) -> dict[str, str]:
    """``python`` is the interpreter running the tests (it has setuptools and pytest), as a job's PATH would say."""
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)]),
            "HOME": str(tmp_path / "home"), "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}


def judge_for(tmp_path: Path, wt: Worktree, gate: str = GATE, builds: tuple[str, ...] = (BUILD,)) -> Judge:
    out, env = tmp_path / "out", gate_env(tmp_path)
    log = SessionLog.create(out / "session.jsonl", cwd=str(tmp_path))
    builder = Builder(collect_builds(list(builds), []), wt, env, out / "build", BoxLimits(), exclude=[".prime-ci"])
    return Judge(gates_from_commands([gate]), wt, env, out / "gates", log, 3, exclude=[".prime-ci"],
                 limits=BoxLimits(), builds=builder)


def cells_in(wt: Worktree) -> FakeExecutor:
    """The model's cells, each run by the real interpreter in the worktree (as the kernel would)."""

    def execute(code: str) -> CellResult:
        proc = subprocess.run([sys.executable, "-c", code], cwd=wt.path, capture_output=True, text=True, timeout=300)
        return cell(proc.stdout + proc.stderr, "ok" if proc.returncode == 0 else "error")

    return FakeExecutor(execute)


def drive(judge: Judge, model: ScriptedModel, kernel: FakeExecutor) -> Stop:
    async def go() -> Stop:
        assert judge.builds is not None
        await judge.builds.start()
        agent = Agent(model, kernel, Budget(Limits()), judge.log, judge, cell_timeout=300.0)
        agent.conversation.add({"role": "system", "content": "system prompt"})
        agent.give_task("Fix add in fastcalc/_calc.c.")
        return await agent.run()

    return asyncio.run(go())


def feedback(model: ScriptedModel, call: int) -> str:
    content = model.calls[call].messages[-1]["content"]
    assert isinstance(content, str)
    return content


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


def test_a_rebuilt_ignored_module_is_gated_again_and_an_unchanged_one_is_skipped(tmp_path: Path) -> None:
    wt = worktree(tmp_path, {"mod.c": "int x;\n", ".gitignore": "*.so\n"})
    judge = judge_for(tmp_path, wt, gate="test \"$(cat mod.so)\" = good", builds=())
    writes = iter(["bad", "worse"])

    def rebuild(code: str) -> str:
        (wt.path / "mod.so").write_text(next(writes))  # what a hand-run compiler leaves: only an ignored file
        return "rebuilt"

    model = ScriptedModel([tool_reply("rebuild"), text_reply("done"), tool_reply("rebuild"), text_reply("done"),
                           text_reply("done, nothing changed"), text_reply("still nothing")])
    stop = drive(judge, model, FakeExecutor(rebuild))
    assert stop.reason == "gates_failed" and judge.failed_rounds == 4
    assert judge.rounds == 2, "the second rebuild changed what the tests load: a new round"
    assert judge.skipped, "the last turn changed nothing: skipped"
    assert "Gates were not rerun" in feedback(model, 5)


def test_build_tables_in_gate_files(tmp_path: Path) -> None:
    path = tmp_path / "gates.toml"
    path.write_text('[[build]]\nname = "ext"\ncommand = "python setup.py build_ext --inplace"\ntimeout = "2m"\n'
                    'env = { CFLAGS = "-O0" }\n')
    assert load_gate_files([path]) == [], "a file of [[build]] tables alone is a gate file"
    [spec] = collect_builds(["make"], builds_from_texts([(str(path), path.read_text())]))[1:]
    assert (spec.name, spec.timeout, spec.env) == ("ext", 120.0, {"CFLAGS": "-O0"})
    path.write_text('[[build]]\nname = "ext"\ncommand = "make"\nnetwork = true\n')
    with pytest.raises(ConfigError, match=r"gates.toml: build\[0\].network: unknown field"):
        load_gate_files([path])
    with pytest.raises(ConfigError, match="duplicate build name"):
        collect_builds(["make"], [spec.model_copy(update={"name": "make"})])
    assert "build" in schemas()["gates"]["properties"] and "build" in schemas()["result"]["properties"]


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
