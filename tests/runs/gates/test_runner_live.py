"""The real runners through prime-ci's gate path: a failing gate run, its parsed failures, its fast rerun."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from prime_ci.gates.fast_rerun import FastRerun, plan_rerun
from prime_ci.gates.feedback import feedback_message
from prime_ci.gates.runner import GateResult, run_gate
from prime_ci.gates.specs import GateSpec
from prime_ci.isolation.limits import Limits

TESTS = """\
import unittest


class TestA(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(1, 1)

    def test_bad(self):
        self.assertEqual(1, 2)


class TestB(unittest.TestCase):
""" + "".join(f"    def test_{i}(self):\n        self.assertTrue({i} % 4)\n\n" for i in range(12))


def _gate(spec: GateSpec, project: Path, tmp_path: Path) -> GateResult:
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"),
           "LANG": "C.UTF-8", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return asyncio.run(run_gate(spec, cwd=project, env=env, log_dir=tmp_path / "logs", limits=Limits()))


def _fast(plan: FastRerun, project: Path, tmp_path: Path) -> GateResult:
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"),
           "LANG": "C.UTF-8", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return asyncio.run(plan.run(plan.current_tests(project), cwd=project, env=env, log_dir=tmp_path / "logs",
                                launcher=(), limits=Limits()))


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "p" / "tests").mkdir(parents=True)
    (tmp_path / "p" / "tests" / "__init__.py").write_text("")
    (tmp_path / "p" / "tests" / "test_live.py").write_text(TESTS)
    return tmp_path / "p"


def test_unittest_gate_names_failures_and_reruns_only_them(project: Path, tmp_path: Path) -> None:
    spec = GateSpec(name="tests", command="python -m unittest")
    result = _gate(spec, project, tmp_path)
    assert result.exit_code == 1 and result.failures_source == "log"
    names = sorted(f.test for f in result.failures)
    assert names == sorted(["tests.test_live.TestA.test_bad", "tests.test_live.TestB.test_0",
                            "tests.test_live.TestB.test_4", "tests.test_live.TestB.test_8"])
    assert {(f.file, f.line) for f in result.failures if f.test.endswith("test_bad")} == {("tests/test_live.py", 9)}
    message = feedback_message([result])
    assert "- tests.test_live.TestA.test_bad: AssertionError: 1 != 2 (tests/test_live.py:9)" in message
    plan = plan_rerun(spec, result, project)
    assert plan is not None and plan.command(plan.tests) == "python -m unittest " + " ".join(
        f.test for f in result.failures)
    fast = _fast(plan, project, tmp_path)
    assert fast.name == "tests.fast" and "Ran 4 tests" in fast.output and not fast.passed
    assert sorted(f.test for f in fast.failures) == names and plan.settles(fast, project)


def test_pytest_xdist_gate_keeps_its_workers_in_the_fast_rerun(project: Path, tmp_path: Path) -> None:
    spec = GateSpec(name="tests", command="python -m pytest -q -n 2 -p no:cacheprovider -p no:randomly tests")
    result = _gate(spec, project, tmp_path)
    assert result.exit_code == 1 and "bringing up nodes" in result.output
    assert len(result.failures) == 4 and all(f.test.startswith("tests/test_live.py::Test") for f in result.failures)
    plan = plan_rerun(spec, result, project)
    assert plan is not None and plan.dropped == ()
    command = plan.command(plan.current_tests(project)) or ""
    assert command.startswith("python -m pytest -q -n 2 -p no:cacheprovider -p no:randomly tests/test_live.py::")
    fast = _fast(plan, project, tmp_path)
    assert "bringing up nodes" in fast.output and "4 failed" in fast.output and "passed" not in fast.output
    assert plan.settles(fast, project)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_test_gate_reruns_the_failing_tests_by_name(tmp_path: Path) -> None:
    project = tmp_path / "n"
    (project / "test").mkdir(parents=True)
    (project / "test" / "a.test.js").write_text(
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        "test('fine', () => {});\n"
        "test.describe('suite', () => {\n  test.it('broken', () => { assert.strictEqual(1, 2); });\n"
        "  test.it('also fine', () => {});\n});\n")
    (project / "test" / "b.test.js").write_text(
        "const test = require('node:test');\ntest('other fine', () => {});\n")
    spec = GateSpec(name="node", command="node --test --test-reporter=tap")
    result = _gate(spec, project, tmp_path)
    assert [(f.test, f.file, f.line) for f in result.failures] == [("suite > broken", "test/a.test.js", 5)]
    plan = plan_rerun(spec, result, project)
    assert plan is not None
    fast = _fast(plan, project, tmp_path)
    assert [f.test for f in fast.failures] == ["suite > broken"] and plan.settles(fast, project)
    assert "other fine" not in fast.output and "# pass 0" in fast.output


LONG_IDS = """\
import pytest


@pytest.mark.parametrize("text", ["short", "x" * 90])
def test_long(text):
    assert text == "never", "long id"


def test_after():
    assert 1 == 2, "the next test"
"""


def test_pytest_sections_of_long_test_ids_keep_their_own_location(tmp_path: Path) -> None:
    # pytest pads a section title with a single "_" when the test id fills the line: "_ tests/...::id _"
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "test_ids.py").write_text(LONG_IDS)
    result = _gate(GateSpec(name="pytest", command="python -m pytest -p no:cacheprovider"), tmp_path / "p", tmp_path)
    log = result.log_path.read_text()
    assert "\n_ test_long[x" in log  # the case this test is about really happened
    found = {f.test: f for f in result.failures}
    assert len(found) == 3, found
    for test, failure in found.items():
        want = 10 if test.endswith("test_after") else 6
        assert (failure.file, failure.line) == ("test_ids.py", want), (test, failure)
        assert "long id" in failure.message or "the next test" in failure.message
