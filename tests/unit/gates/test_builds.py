"""Builds before every gate round, in process: build tables in gate files, and a rebuilt ignored module gated
again, with the judge and the agent loop driven by a scripted model (the real C extension built by a real
compiler is in tests/runs/gates/test_builds_compiled.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_ci.cli.schema_registry import schemas
from prime_ci.errors import ConfigError
from prime_ci.gates.specs import builds_from_texts, collect_builds, load_gate_files
from prime_ci.testing.fakes import FakeExecutor, ScriptedModel, text_reply, tool_reply
from unit.gates.build_rounds import drive, feedback, judge_for, worktree


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
