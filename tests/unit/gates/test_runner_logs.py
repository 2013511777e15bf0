"""Failing tests read from real runners' logs (tests/fixtures/runners, written by make_runner_logs.py).

Every log there was printed by the real tool; the projects lay under /tmp/prime-ci-runners/<name>, so that
directory is the gate's working directory here (go's is made with the project's go.mod).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_ci.gates.failures import scan_log, scan_log_failures
from prime_ci.gates.feedback import LISTED, feedback_message
from prime_ci.gates.runner import GateResult

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "runners"
ROOT = Path("/tmp/prime-ci-runners")

UNITTEST = [
    ("tests.test_parse.TestParse.test_letters",
     "mypkg.exceptions.ParseError: cannot parse 'ab': expected only digits in the input, got something else",
     "mypkg/parse.py", 6),
    *[(f"tests.test_parse.TestMore.test_case_0{i}", f"AssertionError: {i} != {i + 1}", "tests/test_parse.py",
       30 + 3 * i) for i in range(6)],
    ("tests.test_parse.TestParse.test_list", "AssertionError: Lists differ: [1, 2] != [1, 3]", "tests/test_parse.py",
     17),
    ("tests.test_parse.TestParse.test_subtests", "(i=0) AssertionError: 0 != 1", "tests/test_parse.py", 25),
    ("tests.test_parse.TestParse.test_subtests", "(i=2) AssertionError: 2 != 1", "tests/test_parse.py", 25),
    ("tests.test_parse.TestParse.test_sum", "AssertionError: 2 != 3", "tests/test_parse.py", 14),
    ("tests.test_parse.TestParse.test_true", "AssertionError: 0 is not true : zero is falsy", "tests/test_parse.py",
     20),
]


def found(log: str, project: str | Path) -> list[tuple[str, str, str | None, int | None]]:
    cwd = project if isinstance(project, Path) else ROOT / project
    return [(f.test, f.message, f.file, f.line) for f in scan_log_failures(LOGS / log, cwd=cwd)]


@pytest.mark.parametrize("log", ["unittest.log", "unittest-verbose.log", "unittest-py310.log", "setup-py-test.log"])
def test_unittest_logs_name_every_failing_test(log: str) -> None:
    assert found(log, "py") == UNITTEST


def test_django_manage_py_test() -> None:
    assert found("django.log", "django") == [
        ("shop.tests.test_prices.TotalTests.test_error", "TypeError: 'NoneType' object is not iterable",
         "shop/prices.py", 2),
        ("shop.tests.test_prices.DbTests.test_db_bad", "AssertionError: 'x' not found in 'abc'",
         "shop/tests/test_prices.py", 22),
        ("shop.tests.test_prices.TotalTests.test_empty", "AssertionError: -1 != 0", "shop/tests/test_prices.py", 8),
        ("shop.tests.test_prices.TotalTests.test_two", "AssertionError: 2 != 3", "shop/tests/test_prices.py", 11),
    ]


@pytest.mark.parametrize("log", ["pytest.log", "pytest-q.log", "pytest-q-xdist.log"])
def test_pytest_messages_are_not_trimmed_to_the_terminal(log: str) -> None:
    text = (LOGS / log).read_text()
    assert "- mypkg.exceptions.ParseE...\n" in text  # pytest trimmed its own summary line at 80 columns
    failures = {(t, m): (f, n) for t, m, f, n in found(log, "pytest")}
    assert failures[("tests/test_parse.py::TestParse::test_letters",
                     "mypkg.exceptions.ParseError: cannot parse 'ab': expected only digits in the input, got "
                     "something else")] == ("mypkg/parse.py", 6)
    quote = "'" if "xdist" in log else ""
    assert failures[("tests/test_parse.py::TestParse::test_subtests",
                     f"(i={quote}2{quote}) AssertionError: 2 != 1")] == ("tests/test_parse.py", 25)
    assert ("tests/test_plain.py::test_plain_param[x y]", "mypkg.exceptions.ParseError: cannot parse 'x y': "
            "expected only digits in the input, got something else") in failures
    assert len(failures) == 14 and not any(m.endswith("...") for _, m in failures)


def test_pytest_without_tracebacks_keeps_every_id() -> None:
    failures = found("pytest-q-tb-no.log", "pytest")
    assert len(failures) == 14 and len({t for t, *_ in failures}) == 13
    assert failures[0][:2] == ("tests/test_parse.py::TestParse::test_letters", "mypkg.exceptions.ParseE...")


def test_js_go_and_cargo_logs(tmp_path: Path) -> None:
    assert found("node-test.log", "node") == [
        ("subtracts", "Expected values to be strictly equal: 1 !== 2", "test/math.test.js", 5),
        ("rounding > half up", "Expected values to be strictly equal: 3 !== 2", "test/math.test.js", 7),
        ("throws", "bad input", "test/other.test.js", 4),
    ]
    assert [t for t, *_ in found("node-test-spec.log", "node")] == ["subtracts", "rounding > half up", "throws"]
    assert found("jest.log", "jest") == [
        ("sum › adds two", "expect(received).toBe(expected) // Object.is equality", "src/sum.test.js", 5),
        ("top level", "expect(received).toEqual(expected) // deep equality", "src/sum.test.js", 12),
    ]
    assert found("vitest.log", "vitest") == [
        ("src/sum.test.js > sum > adds two", "AssertionError: expected -1 to be 3 // Object.is equality",
         "src/sum.test.js", None),
        ("src/sum.test.js > top level", "AssertionError: expected +0 to deeply equal 4", "src/sum.test.js", None),
    ]
    (tmp_path / "go.mod").write_text("module example.com/calc\n\ngo 1.19\n")
    for log in ("go-test.log", "go-test-v.log"):
        assert found(log, tmp_path) == [
            ("TestAdd", "Add(1, 2) = -1, want 3", "calc_test.go", 7),
            ("TestTable/pos", "got 0, want 4", "calc_test.go", 21),
            ("TestHalf", "Half(4) = 1, want 2", "sub/sub_test.go", 7),  # go prints it relative to its package
        ]
    assert found("cargo-test.log", "cargo") == [
        ("tests::adds", "assertion `left == right` failed: adding 1 and 2 (left: -1, right: 3)", "src/lib.rs", 9),
        ("tests::adds_more", "assertion failed: add(2, 2) == 4", "src/lib.rs", 11),
    ]


def _gate(log: Path, cwd: Path, output: str | None = None) -> GateResult:
    failures, more = scan_log(log, cwd=cwd)
    text = log.read_text() if output is None else output
    return GateResult(name="tests", command="python -m unittest", passed=False, exit_code=1, timed_out=False,
                      output=text, output_bytes=len(text), duration_s=1.0, attempts=1, flaky=False, log_path=log,
                      failures=failures, failures_source="log", more_failures=more)


def test_feedback_lists_all_eleven_unittest_failures_first(tmp_path: Path) -> None:
    """The reported case: 11 failing unittest tests in a long log, their FAIL: headers in its middle."""
    noise = "".join(f"noise line {i} {'x' * 80}\n" for i in range(2000))
    log = tmp_path / "tests.log"
    body = (LOGS / "unittest.log").read_text()
    log.write_text(noise + body + noise)
    head_tail = log.read_text()[:3000] + "\n[... elided ...]\n" + log.read_text()[-3000:]
    result = _gate(log, ROOT / "py", head_tail)
    for limit in (6000, 3000):
        message = feedback_message([result], limit=limit)
        assert len(message) <= limit
        listed = message.split("failing tests (from the full log):\n", 1)[1]
        for test, message, file, line in UNITTEST:
            assert f"- {test}: {message[:40]}" in listed and f"({file}:{line})" in listed, (limit, test)
        assert listed.index("test_true") < listed.index("output (head+tail)")  # the list first, then the log
        assert "more failing test" not in message
    # short of room, the messages are shortened: every name and location is still listed
    tight = feedback_message([result], limit=1600)
    assert all(f"- {test}" in tight and f"({file}:{line})" in tight for test, _, file, line in UNITTEST)
    assert "more failing test" not in tight and "cannot parse 'ab': expected only digits" not in tight


def test_feedback_says_how_many_more_beyond_the_list(tmp_path: Path) -> None:
    log = tmp_path / "many.log"
    log.write_text("".join(f"FAILED tests/test_m.py::test_{i:03} - AssertionError: {i}\n" for i in range(130)))
    result = _gate(log, tmp_path)
    assert len(result.failures) == 50 and result.more_failures == 80
    message = feedback_message([result])
    assert message.count("\n- tests/test_m.py::test_") == LISTED
    assert "- ... and 80 more failing test(s)" in message
    tight = feedback_message([result], limit=1500)
    shown = tight.count("\n- tests/test_m.py::test_")
    assert 0 < shown < LISTED and f"- ... and {130 - shown} more failing test(s)" in tight
