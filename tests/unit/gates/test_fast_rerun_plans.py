"""Issue 13, in process: which fast rerun a retry round plans, from the failing ids and the gate files (the runs are in
tests/runs/gates/test_fast_rerun_runs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_ci.errors import ConfigError
from prime_ci.gates.failures import scan_log_failures
from prime_ci.gates.fast_rerun import MAX_TESTS, derive_pytest_fast, failing_ids, plan_rerun, render, still_failing
from prime_ci.gates.junit import JUnitFailure
from prime_ci.gates.runner import GateResult
from prime_ci.gates.specs import GateSpec, load_gate_files


@pytest.mark.parametrize(
    ("command", "fast"),
    [
        ("pytest", "pytest {tests}"),
        ("pytest -q tests/", "pytest -q {tests}"),
        ("python -m pytest -x -q tests/unit --lf", "python -m pytest -q {tests}"),
        ("python3 -m pytest -k 'add or sub' tests", "python3 -m pytest -k 'add or sub' {tests}"),
        ("uv run pytest -p no:cacheprovider --maxfail 3 tests -n auto",
         "uv run pytest -p no:cacheprovider -n auto {tests}"),
        ("uv run --frozen python -m pytest tests", "uv run --frozen python -m pytest {tests}"),
        (".venv/bin/python -m pytest -xvs tests", ".venv/bin/python -m pytest -vs {tests}"),
        ("FOO='a b' pytest --tb=short --sw", "FOO='a b' pytest --tb=short {tests}"),
        ("pytest --cov src --cov-fail-under=90 -rA tests", "pytest -rA {tests}"),
        ("poetry run pytest --strict-markers --junitxml out.xml tests", "poetry run pytest --strict-markers "
         "--junitxml out.xml {tests}"),
        ("python -X dev -m pytest --some-plugin-flag", "python -X dev -m pytest --some-plugin-flag {tests}"),
        ("pytest -- tests", "pytest {tests}"),
        ("python -Wd -m pytest -q", "python -Wd -m pytest -q {tests}"),
        ("coverage run -m pytest -x tests", "coverage run -m pytest {tests}"),
        ("python -m coverage run --branch --source pkg -m pytest -n 2 tests",
         "python -m coverage run --branch --source pkg -m pytest -n 2 {tests}"),
        ("uv run coverage run --data-file=.cov .venv/bin/pytest", "uv run coverage run --data-file=.cov "
         ".venv/bin/pytest {tests}"),
    ],
)
def test_pytest_fast_command_derived(command: str, fast: str) -> None:
    assert derive_pytest_fast(command) == fast


@pytest.mark.parametrize(
    "command",
    ["pytest -q; echo done", "cd sub && pytest", "pytest $PYTEST_ARGS", "pytest tests/*.py", "pytest | tee log",
     "pytest --unknown-option value tests", "pytest --collect-only", "pytest -Z", "python -m pytest -n",
     "python -c 'import pytest'", "python -m pytest_other", "ruff check .", "make test", "npm test", "tox -e py",
     "env pytest", "uv run --unknown pytest", "pytest 'unterminated", "coverage run --bad -m pytest",
     "coverage run -m pytest_other", "coverage report", "python -m coverage run"],
)
def test_no_fast_command_when_unsure(command: str) -> None:
    assert derive_pytest_fast(command) is None


def _result(tmp_path: Path, log: str, failures: list[JUnitFailure] | None = None, *, passed: bool = False,
            timed_out: bool = False) -> GateResult:
    """A gate run's result as the runner makes it: failures from JUnit when given, else parsed from the log."""
    log_path = tmp_path / "gate.log"
    log_path.write_text(log)
    if failures is None and not passed:
        failures = scan_log_failures(log_path, cwd=tmp_path)
    return GateResult(name="g", command="c", passed=passed, exit_code=0 if passed else 1, timed_out=timed_out,
                      output=log, output_bytes=len(log), duration_s=1.0, attempts=1, flaky=False, log_path=log_path,
                      failures=failures or [])


def test_failing_ids_are_runnable_node_ids(tmp_path: Path) -> None:
    for name in ("tests/test_a.py", "tests/test_b.py", "test_c.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    junit = [JUnitFailure("tests.test_a.TestX::test_one[1.5-x y]", "failure", "m", "t"),
             JUnitFailure("tests.test_gone::test_two", "failure", "m", "t")]
    log = ("\x1b[31mFAILED\x1b[0m tests/test_b.py::test_three - assert 1 == 2\n"
           "FAILED tests/test_a.py::TestX::test_one[1.5-x y] - dup of the JUnit one\n"
           "ERROR test_c.py::test_four\nFAILED ../outside.py::t - no\nFAILED /abs/test_c.py::t - no\n"
           "ERROR test_c.py - collection error, not a node id\n   FAILED indented.py::t - no\n")
    from_junit = _result(tmp_path, log, junit)
    assert failing_ids(from_junit, tmp_path, node_ids=True) == ["tests/test_a.py::TestX::test_one[1.5-x y]"]
    # a template gets the parsed ids as they are
    assert failing_ids(from_junit, tmp_path, node_ids=False) == [f.test for f in junit]
    from_log = _result(tmp_path, log)
    assert failing_ids(from_log, tmp_path, node_ids=True) == [
        "tests/test_b.py::test_three", "tests/test_a.py::TestX::test_one[1.5-x y]", "test_c.py::test_four"]
    clipped = _result(tmp_path, f"FAILED test_c.py::t{'x' * 5000} - cut\nFAILED test_c.py::last - no newline")
    assert failing_ids(clipped, tmp_path, node_ids=True)[-1] == "test_c.py::last"
    many = _result(tmp_path, "".join(f"FAILED test_c.py::t{i} - x\n" for i in range(MAX_TESTS + 20)))
    assert len(failing_ids(many, tmp_path, node_ids=True)) == MAX_TESTS
    assert render("pytest -q {tests}", ["test_c.py::t[a b]", "test_c.py::u"]) == (
        "pytest -q 'test_c.py::t[a b]' test_c.py::u")


def test_fast_template_from_gates_file_is_planned(tmp_path: Path) -> None:
    (tmp_path / "test_c.py").write_text("")
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\nname = "t"\ncommand = "python -m pytest -q"\nfast = "runner --only {tests}"\n'
                     '[[gate]]\nname = "auto"\ncommand = "python -m pytest -q"\n'
                     '[[gate]]\nname = "shell"\ncommand = "pytest -q && echo ok"\n')
    template, auto, shell = load_gate_files([gates])
    failed = _result(tmp_path, "FAILED test_c.py::test_x - boom\nFAILED elsewhere::y - no file\n")
    planned = plan_rerun(template, failed, tmp_path)
    assert planned is not None and planned.template == "runner --only {tests}"
    assert [t.id for t in planned.tests] == ["test_c.py::test_x", "elsewhere::y"]
    derived = plan_rerun(auto, failed, tmp_path)
    assert derived is not None and derived.template == "python -m pytest -q {tests}"
    assert [t.id for t in derived.tests] == ["test_c.py::test_x"]
    assert plan_rerun(shell, failed, tmp_path) is None
    assert plan_rerun(auto, _result(tmp_path, "FAILED test_c.py::t - x\n", timed_out=True), tmp_path) is None
    assert plan_rerun(auto, _result(tmp_path, "no summary lines\n"), tmp_path) is None
    gates.write_text('[[gate]]\nname = "t"\ncommand = "pytest"\nfast = "pytest -x"\n')
    with pytest.raises(ConfigError, match=r"gate\[0\]\.fast: must contain \{tests\}"):
        load_gate_files([gates])
    assert GateSpec(name="t", command="pytest").fast is None


def test_still_failing_needs_named_tests_or_a_timeout(tmp_path: Path) -> None:
    (tmp_path / "test_c.py").write_text("")
    for node_ids in (True, False):
        assert still_failing(_result(tmp_path, "FAILED test_c.py::t - x\n"), tmp_path, node_ids=node_ids)
        assert still_failing(_result(tmp_path, "", timed_out=True), tmp_path, node_ids=node_ids)
        assert not still_failing(_result(tmp_path, "FAIL Required test coverage of 90% not reached.\n"), tmp_path,
                                 node_ids=node_ids)
        assert not still_failing(_result(tmp_path, "", passed=True), tmp_path, node_ids=node_ids)
    # a runner's parsed failure that is no pytest node id does not settle a derived pytest rerun
    coverage = [JUnitFailure("Required test coverage of 90% not reached.", "failure", "", "")]
    assert not still_failing(_result(tmp_path, "", coverage), tmp_path, node_ids=True)
    assert still_failing(_result(tmp_path, "", coverage), tmp_path, node_ids=False)
