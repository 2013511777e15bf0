"""Fast rerun commands per runner, planned from the failures read in the real runners' logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prime_ci.gates import coverage_off
from prime_ci.gates.failures import scan_log
from prime_ci.gates.fast_rerun import FastRerun, plan_rerun
from prime_ci.gates.rerun_commands import derive_rerunner
from prime_ci.gates.runner import GateResult
from prime_ci.gates.specs import GateSpec

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "runners"
ROOT = Path("/tmp/prime-ci-runners")
UNITTEST_IDS = " ".join([
    "tests.test_parse.TestParse.test_letters", *[f"tests.test_parse.TestMore.test_case_0{i}" for i in range(6)],
    "tests.test_parse.TestParse.test_list", "tests.test_parse.TestParse.test_subtests",
    "tests.test_parse.TestParse.test_sum", "tests.test_parse.TestParse.test_true"])


def _project(tmp_path: Path, files: list[str]) -> Path:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    return tmp_path


def _planned(command: str, log: str, root: Path, cwd: Path | None = None) -> FastRerun | None:
    failures, more = scan_log(LOGS / log, cwd=cwd or root)
    result = GateResult(name="tests", command=command, passed=False, exit_code=1, timed_out=False, output="",
                        output_bytes=0, duration_s=1.0, attempts=1, flaky=False, log_path=LOGS / log,
                        failures=failures, failures_source="log", more_failures=more)
    return plan_rerun(GateSpec(name="tests", command=command), result, root)


def _plan(command: str, log: str, root: Path, cwd: Path | None = None) -> tuple[str | None, tuple[str, ...]]:
    plan = _planned(command, log, root, cwd)
    if plan is None:
        return None, ()
    return plan.command(plan.current_tests(root)), plan.dropped


PY_FILES = ["tests/test_parse.py", "tests/test_plain.py", "mypkg/parse.py"]


@pytest.mark.parametrize(
    ("command", "log", "files", "fast", "dropped"),
    [
        ("python -m unittest", "unittest.log", PY_FILES, f"python -m unittest {UNITTEST_IDS}", ()),
        ("python3 -m unittest -v --failfast tests", "unittest-verbose.log", PY_FILES,
         f"python3 -m unittest -v {UNITTEST_IDS}", ("--failfast",)),
        ("python -m unittest discover -s tests -t .", "unittest.log", PY_FILES,
         "python -m unittest discover -s tests -t . -k " + UNITTEST_IDS.replace(" ", " -k "), ()),
        ("python -m unittest discover tests", "unittest.log", PY_FILES,
         "python -m unittest discover -s tests -k " + UNITTEST_IDS.replace(" ", " -k "), ()),
        ("python manage.py test --parallel 2 --failfast shop", "django.log", ["shop/prices.py"],
         "python manage.py test --parallel 2 shop.tests.test_prices.TotalTests.test_error "
         "shop.tests.test_prices.DbTests.test_db_bad shop.tests.test_prices.TotalTests.test_empty "
         "shop.tests.test_prices.TotalTests.test_two", ("--failfast",)),
        ("python setup.py test", "setup-py-test.log", PY_FILES, None, ()),  # one test at a time: run in full
        ("PYTHONHASHSEED=0 python -m pytest -q -n auto -x -p no:randomly --cov=mypkg tests", "pytest-q-xdist.log",
         PY_FILES, "PYTHONHASHSEED=0 python -m pytest -q -n auto -p no:randomly "
         "tests/test_parse.py::TestParse::test_list tests/test_parse.py::TestParse::test_subtests "
         "tests/test_parse.py::TestParse::test_letters tests/test_parse.py::TestParse::test_sum "
         "tests/test_parse.py::TestMore::test_case_00 tests/test_parse.py::TestParse::test_true "
         "tests/test_parse.py::TestMore::test_case_02 tests/test_parse.py::TestMore::test_case_01 "
         "tests/test_parse.py::TestMore::test_case_03 tests/test_parse.py::TestMore::test_case_04 "
         "tests/test_parse.py::TestMore::test_case_05 'tests/test_plain.py::test_plain_param[x y]' "
         "'tests/test_plain.py::test_plain_param[1]'", ("-x", "--cov=mypkg")),
        ("pytest --numprocesses 2 --dist loadfile -c ci.ini tests", "pytest-q-tb-no.log", PY_FILES,
         "pytest --numprocesses 2 --dist loadfile -c ci.ini tests/test_parse.py::TestParse::test_letters", ()),
        ("node --test --test-reporter=tap", "node-test.log", ["test/math.test.js", "test/other.test.js"],
         "node --test --test-reporter=tap '--test-name-pattern=^(?:subtracts|half up|rounding half up|throws)$' "
         "test/math.test.js test/other.test.js", ()),
        ("npx jest --ci --bail", "jest.log", ["src/sum.test.js"],
         "npx jest --ci src/sum.test.js -t '^(?:sum adds two|top level)$' --coverage=false", ("--bail",)),
        ("npx vitest run --reporter=default", "vitest.log", ["src/sum.test.js"],
         "npx vitest run --reporter=default src/sum.test.js -t '^(?:sum adds two|top level)$' "
         "--coverage.enabled=false", ()),
        ("go test -count=1 -run Test ./...", "go-test.log", ["go.mod", "sub/sub_test.go"],
         "go test -count=1 . ./sub -run '^(?:TestAdd|TestTable|TestHalf)$'", ("-run Test",)),
        ("cargo test --offline -- --test-threads 2 adds", "cargo-test.log", ["src/lib.rs"],
         "cargo test --offline -- --test-threads 2 --exact tests::adds tests::adds_more", ("adds",)),
    ],
    ids=["unittest", "unittest-v", "discover", "discover-positional", "django", "setup.py", "pytest-xdist",
         "pytest-xdist-long", "node", "jest", "vitest", "go", "cargo"],
)
def test_fast_rerun_command_per_runner(tmp_path: Path, command: str, log: str, files: list[str], fast: str | None,
                                       dropped: tuple[str, ...]) -> None:
    root = _project(tmp_path, files)
    if log.startswith("go-"):
        (root / "go.mod").write_text("module example.com/calc\n")
    project = {"unittest": "py", "setup": "py", "go": ""}.get(re.split(r"[-.]", log)[0], re.split(r"[-.]", log)[0])
    cwd = ROOT / project if project else root  # where the logged run was; go's paths are relative anyway
    got, why = _plan(command, log, root, cwd)
    if fast is not None and fast.endswith("test_letters") and got:
        got = got.split(" tests/test_parse.py::TestParse::test_list")[0]  # the long list, checked above
    assert got == fast
    assert why == dropped


DJANGO_IDS = ("shop.tests.test_prices.TotalTests.test_error shop.tests.test_prices.DbTests.test_db_bad "
              "shop.tests.test_prices.TotalTests.test_empty shop.tests.test_prices.TotalTests.test_two")


@pytest.mark.parametrize(
    ("command", "log", "fast"),
    [
        ("python -m django test --settings site_cfg.settings shop", "django.log",
         f"python -m django test --settings site_cfg.settings {DJANGO_IDS}"),
        ("python -m django test --noinput --keepdb -b shop", "django.log",
         f"python -m django test --noinput --keepdb -b {DJANGO_IDS}"),
        ("python -m unittest -v --locals tests", "unittest.log", f"python -m unittest -v --locals {UNITTEST_IDS}"),
        ("DJANGO_SETTINGS_MODULE=site_cfg.settings django-admin test -v 2", "django.log",
         f"DJANGO_SETTINGS_MODULE=site_cfg.settings django-admin test -v 2 {DJANGO_IDS}"),
        ("python -Wa manage.py test", "django.log", f"python -Wa manage.py test {DJANGO_IDS}"),
        ("python -W error::DeprecationWarning -X dev -m django test", "django.log",
         f"python -W error::DeprecationWarning -X dev -m django test {DJANGO_IDS}"),
        ("uv run --frozen python -m django test", "django.log", f"uv run --frozen python -m django test {DJANGO_IDS}"),
        ("coverage run -m django test --failfast", "django.log", f"coverage run -m django test {DJANGO_IDS}"),
        ("coverage run --source=shop --branch manage.py test shop", "django.log",
         f"coverage run --source=shop --branch manage.py test {DJANGO_IDS}"),
        ("python -m coverage run -p --rcfile ci.cfg -m django test", "django.log",
         f"python -m coverage run -p --rcfile ci.cfg -m django test {DJANGO_IDS}"),
        ("coverage run -m unittest", "unittest.log", f"coverage run -m unittest {UNITTEST_IDS}"),
        ("coverage3 run -a --omit mypkg/exceptions.py -m unittest -v", "unittest.log",
         f"coverage3 run -a --omit mypkg/exceptions.py -m unittest -v {UNITTEST_IDS}"),
        ("coverage run --module unittest discover -s tests", "unittest.log",
         "coverage run --module unittest discover -s tests -k " + UNITTEST_IDS.replace(" ", " -k ")),
    ],
    ids=["python-m-django", "django-flags", "unittest-flags", "django-admin", "manage.py-Wa", "python-flags", "uv-run",
         "coverage-django", "coverage-manage.py", "python-m-coverage", "coverage-unittest", "coverage-options",
         "coverage-discover"],
)
def test_django_and_coverage_run_launchers_are_narrowed(tmp_path: Path, command: str, log: str, fast: str) -> None:
    root = _project(tmp_path, ["shop/prices.py", *PY_FILES])
    cwd = ROOT / ("django" if log == "django.log" else "py")
    got, dropped = _plan(command, log, root, cwd)
    assert got == fast
    assert dropped == (("--failfast",) if "--failfast" in command else ())


@pytest.mark.parametrize("command", [
    "coverage run --unknown x -m unittest", "coverage run -m", "coverage report --fail-under=90",
    "coverage run runtests.py", "coverage run -m django check", "python -m coverage run -m nose2",
    "python -Q -m django test", "python -W", "python -c 'import django' test", "poetry run -q python -m unittest",
])
def test_launchers_not_read_for_sure_are_not_narrowed(command: str) -> None:
    assert derive_rerunner(command) is None


def test_setup_py_test_reruns_a_single_test(tmp_path: Path) -> None:
    log = tmp_path / "one.log"
    text = (LOGS / "setup-py-test.log").read_text()
    start = text.index("=" * 70 + "\nFAIL: test_sum")
    log.write_text(text[start : text.index("=" * 70, start + 71)] + "-" * 70 + "\nRan 1 test\n")
    failures, _ = scan_log(log, cwd=ROOT / "py")
    result = GateResult(name="t", command="python setup.py test", passed=False, exit_code=1, timed_out=False,
                        output="", output_bytes=0, duration_s=1, attempts=1, flaky=False, log_path=log,
                        failures=failures)
    plan = plan_rerun(GateSpec(name="t", command="python setup.py test"), result, tmp_path)
    assert plan is not None
    assert plan.command(plan.tests) == "python setup.py test -s tests.test_parse.TestParse.test_sum"


@pytest.mark.parametrize("command", [
    "npm test", "make test", "python -m unittest $TESTS", "node test/a.js", "npx vitest bench", "go vet ./...",
    "python manage.py check", "cargo test --weird value", "npx jest --unknown value", "python setup.py build test",
])
def test_no_rerun_when_unsure(command: str) -> None:
    assert derive_rerunner(command) is None


def test_dropped_options_are_said(tmp_path: Path) -> None:
    root = _project(tmp_path, PY_FILES)
    failures, _ = scan_log(LOGS / "pytest-q.log", cwd=ROOT / "pytest")
    result = GateResult(name="tests", command="c", passed=False, exit_code=1, timed_out=False, output="",
                        output_bytes=0, duration_s=1, attempts=1, flaky=False, log_path=LOGS / "pytest-q.log",
                        failures=failures)
    plan = plan_rerun(GateSpec(name="tests", command="pytest -x -n 4 --cov=mypkg"), result, root)
    assert plan is not None
    assert plan.note() == ("The fast rerun of gate tests left out -x, --cov=mypkg (they select or stop tests, or "
                           "measure the whole suite); the full gate keeps them.")
    kept = plan_rerun(GateSpec(name="tests", command="pytest -n 4"), result, root)
    assert kept is not None and kept.note() == "" and "-n 4" in (kept.command(kept.tests) or "")


@pytest.mark.parametrize(
    ("command", "script", "fast"),
    [
        ("npm test", "jest --ci", "npm test -- src/sum.test.js -t '^(?:sum adds two|top level)$' --coverage=false"),
        ("npm run unit", "vitest", "npm run unit -- src/sum.test.js -t '^(?:sum adds two|top level)$' "
         "--coverage.enabled=false"),
        ("pnpm test", "vitest run", "pnpm test src/sum.test.js -t '^(?:sum adds two|top level)$' "
         "--coverage.enabled=false"),
        ("yarn unit", "jest --coverage", "yarn unit src/sum.test.js -t '^(?:sum adds two|top level)$' "
         "--coverage=false"),
        # vitest refuses --coverage.enabled twice: the script's own stays, the rerun adds none
        ("npm test", "vitest run --coverage.enabled=true",
         "npm test -- src/sum.test.js -t '^(?:sum adds two|top level)$'"),
        ("npm test", "jest && eslint .", None),
        ("npm test", "mocha", None),
        ("npm run missing", "jest", None),
    ],
)
def test_package_scripts_of_known_runners(tmp_path: Path, command: str, script: str, fast: str | None) -> None:
    root = _project(tmp_path, ["src/sum.test.js"])
    (root / "package.json").write_text(json.dumps({"scripts": {"test": script, "unit": script}}))
    log = "vitest.log" if "vitest" in script else "jest.log"
    got, _ = _plan(command, log, root, ROOT / log.split(".")[0])
    assert got == fast


COVERAGE_NOTE = ("Coverage thresholds are off in the fast rerun of gate tests ({}): a few tests cover less than the "
                 "suite; the full gate checks them.")


@pytest.mark.parametrize(
    ("command", "log", "fast", "note"),
    [
        # pytest-cov's threshold from the project's addopts, shown by the full run: off in the rerun
        ("python -m pytest -q", "pytest-cov.log", "python -m pytest -q --cov-fail-under=0 tests/test_parse.py::",
         COVERAGE_NOTE.format("--cov-fail-under=0")),
        # no pytest-cov in sight: the option would be an error
        ("python -m pytest -q", "pytest-q.log", "python -m pytest -q tests/test_parse.py::", ""),
        # the command's own threshold: left out, and any other (coverage's fail_under) turned off
        ("pytest --cov=mypkg --cov-fail-under 90", "pytest-q.log", "pytest --cov-fail-under=0 tests/test_parse.py::",
         "The fast rerun of gate tests left out --cov=mypkg, --cov-fail-under 90 (they select or stop tests, or "
         "measure the whole suite); the full gate keeps them. " + COVERAGE_NOTE.format("--cov-fail-under=0")),
        ("npx jest --coverage", "jest.log",
         "npx jest src/sum.test.js -t '^(?:sum adds two|top level)$' --coverage=false",
         "The fast rerun of gate tests left out --coverage (they select or stop tests, or measure the whole suite); "
         "the full gate keeps them. " + COVERAGE_NOTE.format("--coverage=false")),
        ("npx vitest run --coverage.enabled=true", "vitest.log",
         "npx vitest run src/sum.test.js -t '^(?:sum adds two|top level)$' --coverage.enabled=false",
         "The fast rerun of gate tests left out --coverage.enabled=true (they select or stop tests, or measure the "
         "whole suite); the full gate keeps them. " + COVERAGE_NOTE.format("--coverage.enabled=false")),
    ],
    ids=["pytest-cov-addopts", "pytest-no-cov", "pytest-cov-command", "jest", "vitest"],
)
def test_coverage_thresholds_are_off_in_fast_reruns_and_said(tmp_path: Path, command: str, log: str, fast: str,
                                                             note: str) -> None:
    root = _project(tmp_path, [*PY_FILES, "src/sum.test.js"])
    cwd = ROOT / log.removesuffix(".log").replace("pytest-q", "pytest")
    plan = _planned(command, log, root, cwd)
    assert plan is not None
    assert (plan.command(plan.current_tests(root)) or "").startswith(fast)
    assert plan.note() == note


def test_a_pytest_cov_threshold_is_found_anywhere_in_a_big_log(tmp_path: Path) -> None:
    log = tmp_path / "gate.log"
    line = b"FAIL Required test coverage of 90% not reached. Total coverage: 41.00%\n"
    for at in (0, (1 << 20) - 20, 5 << 20):  # the start, across two blocks, far in
        log.write_bytes(b"x" * at + line + b"FAILED tests/test_a.py::test_b - no\n" * 100)
        assert coverage_off.pytest_threshold(log, ())
    log.write_bytes(b"x" * (3 << 20) + b"Required test coverage of \n")
    assert not coverage_off.pytest_threshold(log, ())
    assert not coverage_off.pytest_threshold(tmp_path / "missing.log", ())
    assert coverage_off.pytest_threshold(tmp_path / "missing.log", ("--cov-fail-under=80",))
