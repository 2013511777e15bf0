"""Builds before every gate round, in process: build tables in gate files, and a rebuilt ignored module gated
again, with the judge and the agent loop driven by a scripted model (the real C extension built by a real
compiler is in tests/runs/gates/test_builds_compiled.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from prime_ci.cli.schema_registry import schemas
from prime_ci.errors import ConfigError
from prime_ci.gates.builds import Builder
from prime_ci.gates.specs import builds_from_texts, collect_builds, load_gate_files
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.isolation.worktree import Worktree
from prime_ci.testing.fakes import FakeExecutor, ScriptedModel, text_reply, tool_reply
from unit.gates.build_rounds import drive, feedback, gate_env, judge_for, worktree


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


# a build tool that compares whole seconds, as the distutils of setuptools 65.5 does: it builds build/mod.so when
# the source's second is later than the output's (TARGET: or than the in-place copy's), then copies it in place
# with an mtime cut to the second (distutils' copy_file); built.at keeps the output's mtime as the build left it
WHOLE_SECONDS = """import os
src, out, target = 'mod.c', 'build/mod.so', 'TARGET'
if not os.path.exists(target) or int(os.stat(src).st_mtime) > int(os.stat(target).st_mtime):
    os.makedirs('build', exist_ok=True)
    open(out, 'w').write(open(src).read())
    open('built.at', 'w').write(str(os.stat(out).st_mtime_ns))
    open('mod.so', 'w').write(open(out).read())
    whole = int(os.stat(out).st_mtime)
    os.utime('mod.so', (whole, whole))
"""


def builder_for(tmp_path: Path, wt: Worktree, command: str) -> Builder:
    return Builder(collect_builds([command], []), wt, gate_env(tmp_path), tmp_path / "out" / "build", BoxLimits(),
                   exclude=[".prime-ci"])


@pytest.mark.parametrize("target", ["build/mod.so", "mod.so"])
def test_an_edit_in_the_second_the_build_wrote_its_output_is_built(tmp_path: Path, target: str) -> None:
    make = WHOLE_SECONDS.replace("TARGET", target)  # mod.so: an mtime older than the build, which its ctime gives away
    wt = worktree(tmp_path, {"mod.c": "bad\n", "make.py": make, ".gitignore": "*.so\nbuild/\nbuilt.at\n"})
    builder = builder_for(tmp_path, wt, "python make.py")
    asyncio.run(builder.start())
    assert (wt.path / "mod.so").read_text() == "bad\n"
    written = int((wt.path / "built.at").read_text())
    (wt.path / "mod.c").write_text("good\n")
    # the fix, made as soon as the build was done: in the second the build wrote its output (idle machine)
    edited = min(written + 1, written // 10**9 * 10**9 + 10**9 - 1)
    os.utime(wt.path / "mod.c", ns=(edited, edited))
    asyncio.run(builder.run())
    assert (wt.path / "mod.so").read_text() == "good\n", "the fix was not built: the old module is tested"
    assert builder.hidden() == []


def test_a_module_put_back_after_the_build_keeps_its_mtime(tmp_path: Path) -> None:
    make = WHOLE_SECONDS.replace("TARGET", "build/mod.so")
    wt = worktree(tmp_path, {"mod.c": "bad\n", "make.py": make, ".gitignore": "*.so\nbuild/\nbuilt.at\n"})
    builder = builder_for(tmp_path, wt, "python make.py")
    asyncio.run(builder.start())
    planted = wt.path / "other.so"  # the model's, where no build writes: set aside for the build, then put back
    planted.write_text("the model's\n")
    os.utime(planted, ns=(1_700_000_000_123_456_789, 1_700_000_000_987_654_321))
    assert builder.hidden() == ["other.so"]
    asyncio.run(builder.run())
    assert planted.read_text() == "the model's\n" and planted.stat().st_mtime_ns == 1_700_000_000_987_654_321
    assert builder.hidden() == ["other.so"]
