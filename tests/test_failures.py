"""Failing tests from a gate's log (every common runner) and from JUnit reports, fed back to the model.

node, pytest and cargo outputs are produced here by running the real tools on small projects; jest,
vitest, go test and tape are not installed, so their outputs are verbatim samples of their formats.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prime_ci.gates.failures import MAX_FAILURES, scan_log_failures
from prime_ci.gates.junit import (
    FAILURE_TEXT_LIMIT,
    JUnitFailure,
    github_annotations,
    parse_junit_failures,
    write_gates_junit,
)
from prime_ci.gates.runner import GateResult, GateSpec, feedback_message, load_gate_files, run_gate
from prime_ci.isolation.limits import Limits

REPO = Path(__file__).resolve().parents[1]
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
needs_cargo = pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}


def _log(tmp_path: Path, command: list[str], cwd: Path, env: dict[str, str], name: str = "out.log") -> Path:
    """Run a real tool, its stdout and stderr merged into a log file, as a gate's log is."""
    log = tmp_path / name
    with log.open("wb") as out:
        subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=300)
    return log


def _found(failures: list[JUnitFailure]) -> list[tuple[str, str, str | None, int | None]]:
    return [(f.test, f.message, f.file, f.line) for f in failures]


# --- node --test -----------------------------------------------------------------------------------------

NODE_TESTS = """\
const test = require('node:test');
const assert = require('node:assert');
test('passes', () => { assert.ok(true); });
test('fails strict', () => { assert.strictEqual(1, 2); });
test('throws', () => { throw new Error('kaboom'); });
test('skipped', { skip: 'not now' }, () => {});
test('todo', { todo: true }, () => { throw new Error('todo fail'); });
test.describe('suite A', () => {
  test.it('inner ok', () => {});
  test.it('inner bad', () => { assert.deepStrictEqual({ a: 1 }, { a: 2 }); });
});
test('parent', async (t) => {
  await t.test('child bad', () => { assert.equal('x', 'y', 'custom msg'); });
});
"""


def _node_project(path: Path) -> Path:
    (path / "test").mkdir(parents=True)
    (path / "test" / "a.test.js").write_text(NODE_TESTS)
    return path


def _node_expectation(prefix: str = "") -> list[tuple[str, str, str | None, int | None]]:
    return [
        ("fails strict", f"{prefix}Expected values to be strictly equal: 1 !== 2", "test/a.test.js", 4),
        ("throws", ("Error: " if prefix else "") + "kaboom", "test/a.test.js", 5),
        ("suite A > inner bad", f"{prefix}Expected values to be strictly deep-equal: + actual - expected",
         "test/a.test.js", 10),
        ("parent > child bad", f"{prefix}custom msg" + ("" if prefix else " (expected 'y', actual 'x')"),
         "test/a.test.js", 13),
    ]


@needs_node
def test_node_tap_output(tmp_path: Path, env: dict[str, str]) -> None:
    project = _node_project(tmp_path / "p")
    log = _log(tmp_path, ["node", "--test", "--test-reporter=tap"], project, env)
    assert "# Subtest: suite A" in log.read_text() and "not ok 6 - suite A" in log.read_text()
    failures = scan_log_failures(log, cwd=project)
    # skip/todo tests and the parents that only failed through a subtest are not failures of their own
    assert _found(failures) == _node_expectation()
    strict = failures[0]
    assert "1 !== 2" in strict.text and "node:internal" not in strict.text and "duration_ms" not in strict.text
    assert scan_log_failures(log)[0].file == str(project / "test" / "a.test.js")


@needs_node
def test_node_spec_output(tmp_path: Path, env: dict[str, str]) -> None:
    project = _node_project(tmp_path / "p")
    log = _log(tmp_path, ["node", "--test", "--test-reporter=spec"], project, env)
    assert "✖ failing tests:" in log.read_text()  # the failures are listed twice: reported once
    failures = scan_log_failures(log, cwd=project)
    assert _found(failures) == _node_expectation("AssertionError [ERR_ASSERTION]: ")
    assert "1 !== 2" in failures[0].text and "operator: 'strictEqual'" in failures[0].text


@needs_node
def test_node_junit_report(tmp_path: Path, env: dict[str, str]) -> None:
    project = _node_project(tmp_path / "p")
    _log(tmp_path, ["node", "--test", "--test-reporter=junit", "--test-reporter-destination=r.xml"], project, env)
    failures = parse_junit_failures(project / "r.xml", cwd=project)
    assert [(f.test, f.file, f.line) for f in failures] == [
        ("fails strict", "test/a.test.js", 4),
        ("throws", "test/a.test.js", 5),
        ("suite A > inner bad", "test/a.test.js", 10),
        ("parent > child bad", "test/a.test.js", 13),
    ]
    assert failures[1].message == "kaboom" and "1 !== 2" in failures[0].message
    assert "node:internal" not in failures[0].text and "a.test.js:4:" in failures[0].text


@needs_node
def test_node_preset_writes_junit(tmp_path: Path, env: dict[str, str]) -> None:
    [spec] = load_gate_files([REPO / "gates" / "node.toml"])
    project = _node_project(tmp_path / "p")
    result = asyncio.run(run_gate(spec, cwd=project, env=env, log_dir=tmp_path / "logs", limits=Limits()))
    assert result.exit_code == 1 and result.failures_source == "junit"
    assert [f.test for f in result.failures] == ["fails strict", "throws", "suite A > inner bad", "parent > child bad"]
    assert "✖ fails strict" in result.output  # the spec report still goes to the log
    message = feedback_message([result])
    assert "failing tests (JUnit):\n- fails strict: Expected values to be strictly equal:" in message
    assert "(test/a.test.js:4)" in message


# --- a 1 MB+ TAP stream with one failure in the middle, through a real gate ---------------------------------

BIG_TAP = """\
const test = require('node:test');
const assert = require('node:assert');
const pad = 'x'.repeat(700);  // long names: over 1 MiB of TAP from few tests (node's time is per test)
for (let i = 0; i < 1000; i++) {
  if (i === 500) test('the broken one', () => { assert.strictEqual(1, 2); });
  test(`passing test number ${i} ${pad}`, () => {});
}
"""


@pytest.fixture(scope="module")
def big_tap_gate(tmp_path_factory: pytest.TempPathFactory) -> GateResult:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    tmp = tmp_path_factory.mktemp("big")
    (tmp / "p").mkdir()
    (tmp / "p" / "big.test.js").write_text(BIG_TAP)
    spec = GateSpec(name="npm-test", command="node --test --test-reporter=tap")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "LANG": "C.UTF-8"}
    return asyncio.run(run_gate(spec, cwd=tmp / "p", env=env, log_dir=tmp / "logs", limits=Limits()))


def test_failure_in_the_elided_middle_of_a_big_tap_stream_is_fed_back(big_tap_gate: GateResult) -> None:
    result = big_tap_gate
    assert result.exit_code == 1 and result.output_bytes > 1024 * 1024
    assert "the broken one" not in result.output  # in the elided middle of head+tail
    assert result.failures_source == "log"
    assert _found(result.failures) == [
        ("the broken one", "Expected values to be strictly equal: 1 !== 2", "big.test.js", 5),
    ]
    for limit in (6000, 1500):
        message = feedback_message([result], limit=limit)
        assert len(message) <= limit
        assert "failing tests (from the full log):\n" in message
        assert "- the broken one: Expected values to be strictly equal: 1 !== 2 (big.test.js:5)" in message
    assert "output (head+tail):" in feedback_message([result])


def test_log_failures_reach_junit_and_annotations(big_tap_gate: GateResult, tmp_path: Path) -> None:
    [annotation] = github_annotations([big_tap_gate])
    assert annotation.startswith("::error file=big.test.js,line=5,title=npm-test%3A the broken one::the broken one: ")
    write_gates_junit([big_tap_gate], tmp_path / "junit.xml")
    report = (tmp_path / "junit.xml").read_text()
    assert "- the broken one: Expected values to be strictly equal: 1 !== 2 (big.test.js:5)" in report
    assert big_tap_gate.to_dict()["failures_source"] == "log"


# --- pytest ----------------------------------------------------------------------------------------------

PYTEST_TESTS = """\
import pytest

class TestC:
    def test_y(self):
        assert [1, 2] == [1, 3]

@pytest.mark.parametrize("v", [1, "a b", "x - y"])
def test_p(v):
    assert v == 1, f"bad {v}"

@pytest.fixture
def broken():
    raise RuntimeError("fixture boom")

def test_uses(broken):
    pass
"""


def _pytest_project(path: Path) -> Path:
    (path / "tests").mkdir(parents=True)
    (path / "tests" / "test_x.py").write_text(PYTEST_TESTS)
    return path


def _pytest(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args]


@pytest.mark.parametrize("color", ["no", "yes"])
def test_pytest_output(tmp_path: Path, env: dict[str, str], color: str) -> None:
    project = _pytest_project(tmp_path / "p")
    log = _log(tmp_path, _pytest(f"--color={color}"), project, env)
    assert ("\x1b[" in log.read_text()) == (color == "yes")
    failures = scan_log_failures(log, cwd=project)
    assert _found(failures) == [
        ("tests/test_x.py::TestC::test_y", "assert [1, 2] == [1, 3]", "tests/test_x.py", 5),
        ("tests/test_x.py::test_p[a b]", "AssertionError: bad a b", "tests/test_x.py", 9),
        ("tests/test_x.py::test_p[x - y]", "AssertionError: bad x - y", "tests/test_x.py", 9),
        ("tests/test_x.py::test_uses", "RuntimeError: fixture boom", "tests/test_x.py", 13),
    ]
    assert [f.kind for f in failures] == ["failure", "failure", "failure", "error"]
    assert "At index 1 diff: 2 != 3" in failures[0].text and "\x1b" not in failures[0].text


def test_pytest_collection_error(tmp_path: Path, env: dict[str, str]) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "test_imports.py").write_text("import not_a_module_anywhere\n")
    log = _log(tmp_path, _pytest(), project, env)
    [failure] = scan_log_failures(log, cwd=project)
    assert (failure.test, failure.kind) == ("test_imports.py", "error")
    assert (failure.file, failure.line) == ("test_imports.py", 1)
    assert "No module named 'not_a_module_anywhere'" in failure.message


def test_pytest_junit_gives_runnable_node_ids(tmp_path: Path, env: dict[str, str]) -> None:
    project = _pytest_project(tmp_path / "p")
    (project / "tests" / "test_gone.py").write_text("import not_a_module_anywhere\n")
    _log(tmp_path, _pytest("--junitxml=r.xml", "-o", "junit_family=xunit2"), project, env)
    failures = parse_junit_failures(project / "r.xml", cwd=project)
    assert [f.test for f in failures] == ["tests/test_gone.py"]  # a collection error stops the run
    (project / "tests" / "test_gone.py").unlink()
    _log(tmp_path, _pytest("--junitxml=r.xml"), project, env)
    failures = parse_junit_failures(project / "r.xml", cwd=project)
    assert [f.test for f in failures] == [
        "tests/test_x.py::TestC::test_y", "tests/test_x.py::test_p[a b]", "tests/test_x.py::test_p[x - y]",
        "tests/test_x.py::test_uses",
    ]
    assert failures[0].file == "tests/test_x.py" and failures[0].line == 5
    unresolved = parse_junit_failures(project / "r.xml", cwd=tmp_path)  # no such file there: kept as is
    assert unresolved[0].test == "tests.test_x.TestC::test_y"


# --- cargo test ------------------------------------------------------------------------------------------

CARGO_LIB = """\
pub fn add(a: i32, b: i32) -> i32 { a + b }

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn adds() { assert_eq!(add(1, 1), 2); }
    #[test]
    fn bad_eq() { assert_eq!(add(1, 1), 3, "sum of {} and {}", 1, 1); }
    #[test]
    fn bad_index() { let v: Vec<i32> = vec![]; let _ = v[3]; }
    #[test]
    fn prints_then_fails() { println!("debug line"); assert!(add(0, 0) == 1); }
}
"""


@needs_cargo
@pytest.mark.parametrize("backtrace", ["0", "1"])
def test_cargo_test_output(tmp_path: Path, env: dict[str, str], backtrace: str) -> None:
    crate = tmp_path / "demo"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n')
    (crate / "src" / "lib.rs").write_text(CARGO_LIB)
    cargo_env = {**env, "CARGO_HOME": os.environ.get("CARGO_HOME", str(Path.home() / ".cargo")),
                 "RUSTUP_HOME": os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
                 "CARGO_TARGET_DIR": str(tmp_path / "target"), "RUST_BACKTRACE": backtrace}
    log = _log(tmp_path, ["cargo", "test", "--offline", "--quiet"], crate, cargo_env)
    assert "---- tests::bad_eq stdout ----" in log.read_text(), log.read_text()[-2000:]
    failures = sorted(scan_log_failures(log, cwd=crate), key=lambda f: f.test)  # the tests run in parallel
    assert _found(failures) == [
        ("tests::bad_eq", "assertion `left == right` failed: sum of 1 and 1 (left: 2, right: 3)", "src/lib.rs", 9),
        ("tests::bad_index", "index out of bounds: the len is 0 but the index is 3", "src/lib.rs", 11),
        ("tests::prints_then_fails", "assertion failed: add(0, 0) == 1", "src/lib.rs", 13),
    ]
    assert "debug line" in failures[2].text and "core::panicking" not in "".join(f.text for f in failures)


# --- runners that are not installed here: verbatim samples of their output ---------------------------------

JEST = """\
FAIL src/broken.test.js
  ● Test suite failed to run

    Cannot find module './missing' from 'src/broken.test.js'

    > 1 | const missing = require('./missing');
        |                 ^
      2 |

      at Resolver._throwModNotFoundError (node_modules/jest-resolve/build/resolver.js:427:11)
      at Object.require (src/broken.test.js:1:17)

FAIL src/sum.test.js
  math
    ✓ adds (2 ms)
    ✕ subtracts (4 ms)

  ● math › subtracts

    expect(received).toBe(expected) // Object.is equality

    Expected: 1
    Received: 2

      4 |   });
      5 |   test('subtracts', () => {
    > 6 |     expect(2 - 1 + 1).toBe(1);
        |                       ^
      7 |   });
      8 | });
      9 |

      at Object.toBe (src/sum.test.js:6:23)

Summary of all failing tests
FAIL src/sum.test.js
  ● math › subtracts

    expect(received).toBe(expected) // Object.is equality

    Expected: 1
    Received: 2

      at Object.toBe (src/sum.test.js:6:23)


Test Suites: 2 failed, 2 total
Tests:       1 failed, 1 passed, 2 total
Snapshots:   0 total
Time:        0.412 s, estimated 1 s
Ran all test suites.
"""

VITEST = """\

 RUN  v1.6.0 /home/runner/work/proj

 ❯ src/sum.test.ts  (2 tests | 1 failed) 6ms
   × math > subtracts
     → expected 2 to be 1 // Object.is equality

⎯⎯⎯⎯⎯⎯⎯ Failed Tests 1 ⎯⎯⎯⎯⎯⎯⎯

 FAIL  src/sum.test.ts > math > subtracts
AssertionError: expected 2 to be 1 // Object.is equality

- Expected
+ Received

- 1
+ 2

 ❯ src/sum.test.ts:6:23
      4|   });
      5|   test('subtracts', () => {
      6|     expect(2 - 1 + 1).toBe(1);
       |                       ^
      7|   });
      8| });

⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯[1/1]⎯

 Test Files  1 failed (1)
      Tests  1 failed | 1 passed (2)
   Start at  10:12:30
   Duration  312ms (transform 25ms, setup 0ms, collect 18ms, tests 6ms, environment 0ms, prepare 77ms)

"""

GO = """\
--- FAIL: TestAdd (0.00s)
    add_test.go:12: Add(1, 2) = 4, want 3
--- FAIL: TestTable (0.00s)
    --- FAIL: TestTable/negative (0.00s)
        add_test.go:25: Add(-1, -2) = -4, want -3
--- FAIL: TestPanic (0.00s)
panic: runtime error: index out of range [5] with length 3 [recovered]
\tpanic: runtime error: index out of range [5] with length 3

goroutine 18 [running]:
testing.tRunner.func1.2({0x5163a0, 0xc000018150})
\t/usr/local/go/src/testing/testing.go:1545 +0x238
panic({0x5163a0?, 0xc000018150?})
\t/usr/local/go/src/runtime/panic.go:914 +0x21f
example.com/calc.TestPanic(0x0?)
\t/home/u/calc/add_test.go:31 +0x1d
testing.tRunner(0xc0000a0820, 0x53c7b0)
\t/usr/local/go/src/testing/testing.go:1595 +0xff
exit status 2
FAIL\texample.com/calc\t0.004s
"""

GO_VERBOSE = """\
=== RUN   TestAdd
    add_test.go:12: Add(1, 2) = 4, want 3
--- FAIL: TestAdd (0.00s)
=== RUN   TestSub
--- PASS: TestSub (0.00s)
=== RUN   TestTable
=== RUN   TestTable/positive
=== RUN   TestTable/negative
    add_test.go:25: Add(-1, -2) = -4, want -3
--- FAIL: TestTable (0.00s)
    --- PASS: TestTable/positive (0.00s)
    --- FAIL: TestTable/negative (0.00s)
FAIL
FAIL\texample.com/calc\t0.003s
FAIL
"""

TAPE = """\
TAP version 13
# adds numbers
ok 1 should be strictly equal
# subtracts numbers
not ok 2 should be strictly equal
  ---
    operator: equal
    expected: 1
    actual:   2
    at: Test.<anonymous> (/home/u/proj/test/sum.js:9:5)
    stack: |-
      Error: should be strictly equal
          at Test.assert [as _assert] (/home/u/proj/node_modules/tape/lib/test.js:479:48)
          at Test.<anonymous> (/home/u/proj/test/sum.js:9:5)
  ...

1..2
# tests 2
# pass  1
# fail  1
"""

BATS = """\
1..3
ok 1 addition using bc
not ok 2 addition using dc
# (in test file test/add.bats, line 9)
#   `[ "$result" -eq 4 ]' failed
not ok 3 subtraction
# (in test file test/add.bats, line 14)
#   `[ "$status" -eq 0 ]' failed with status 2
"""

CARGO_BEFORE_1_73 = """\
running 1 test
test tests::old ... FAILED

failures:

---- tests::old stdout ----
thread 'tests::old' panicked at 'assertion failed: `(left == right)`
  left: `1`,
 right: `2`', src/lib.rs:10:9
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    tests::old
    tests::other

test result: FAILED. 0 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
"""


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        (JEST, [
            ("src/broken.test.js", "Cannot find module './missing' from 'src/broken.test.js'", "src/broken.test.js", 1),
            ("math › subtracts", "expect(received).toBe(expected) // Object.is equality", "src/sum.test.js", 6),
        ]),
        (VITEST, [
            ("src/sum.test.ts > math > subtracts", "AssertionError: expected 2 to be 1 // Object.is equality",
             "src/sum.test.ts", 6),
        ]),
        (GO, [
            ("TestAdd", "Add(1, 2) = 4, want 3", "add_test.go", 12),
            ("TestTable/negative", "Add(-1, -2) = -4, want -3", "add_test.go", 25),
            ("TestPanic", "panic: runtime error: index out of range [5] with length 3 [recovered]", "add_test.go", 31),
        ]),
        (GO_VERBOSE, [
            ("TestAdd", "Add(1, 2) = 4, want 3", "add_test.go", 12),
            ("TestTable/negative", "Add(-1, -2) = -4, want -3", "add_test.go", 25),
        ]),
        (TAPE, [("subtracts numbers", "should be strictly equal (expected 1, actual 2)", "test/sum.js", 9)]),
        (BATS, [
            ("addition using dc", "`[ \"$result\" -eq 4 ]' failed", "test/add.bats", 9),
            ("subtraction", "`[ \"$status\" -eq 0 ]' failed with status 2", "test/add.bats", 14),
        ]),
        (CARGO_BEFORE_1_73, [
            ("tests::old", "assertion failed: `(left == right)` (left: `1`, right: `2`)", "src/lib.rs", 10),
            ("tests::other", "", None, None),
        ]),
    ],
    ids=["jest", "vitest", "go", "go-verbose", "tape", "bats", "cargo-old"],
)
def test_runner_samples(tmp_path: Path, sample: str, expected: list[tuple[str, str, str | None, int | None]]) -> None:
    log = tmp_path / "out.log"
    log.write_text(sample)
    failures = scan_log_failures(log, cwd=Path("/home/u/calc" if "go" in sample else "/home/u/proj"))
    assert _found(failures) == expected
    assert all(f.text or not f.message for f in failures)


def test_vitest_cross_lines_count_when_there_is_no_failed_tests_section(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    log.write_text(VITEST.split("⎯⎯⎯⎯⎯⎯⎯ Failed Tests")[0])
    assert _found(scan_log_failures(log)) == [
        ("math > subtracts", "expected 2 to be 1 // Object.is equality", None, None),
    ]


def test_jest_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(textwrap.dedent("""\
        <?xml version="1.0" encoding="UTF-8"?>
        <testsuites name="jest tests" tests="2" failures="1" errors="0" time="0.512">
          <testsuite name="src/sum.test.js" errors="0" failures="1" skipped="0"
                     timestamp="2024-05-01T10:00:00" time="0.301" tests="2">
            <testcase classname="math adds" name="math adds" time="0.002">
            </testcase>
            <testcase classname="math subtracts" name="math subtracts" time="0.004">
              <failure>Error: expect(received).toBe(expected) // Object.is equality

        Expected: 1
        Received: 2
            at Object.toBe (/home/runner/work/proj/src/sum.test.js:6:23)
            at Promise.then.completed (/home/runner/work/proj/node_modules/jest-circus/build/utils.js:298:28)
            at new Promise (&lt;anonymous&gt;)</failure>
            </testcase>
          </testsuite>
        </testsuites>
        """))
    [failure] = parse_junit_failures(report, cwd=Path("/home/runner/work/proj"))
    assert _found([failure]) == [
        ("math subtracts", "Error: expect(received).toBe(expected) // Object.is equality", "src/sum.test.js", 6),
    ]
    assert "Received: 2" in failure.text and "jest-circus" not in failure.text


# --- bounds ----------------------------------------------------------------------------------------------


def test_a_failure_in_the_middle_of_a_5mb_log_with_an_overlong_line(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    noise = b"ok 1 - some passing test with a name\n" * 70_000
    with log.open("wb") as out:
        out.write(noise)
        out.write(b"\x1b[31m" + b"z" * 3_000_000 + b"\x1b[0m")  # no newline for 3 MB
        out.write(b"\nFAILED tests/test_mid.py::test_mid - \x1b[1mAssertionError: in the middle\x1b[0m\n")
        out.write(noise)
    assert log.stat().st_size > 5_000_000
    assert _found(scan_log_failures(log)) == [
        ("tests/test_mid.py::test_mid", "AssertionError: in the middle", None, None),
    ]


def test_failures_and_their_details_are_bounded(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    huge_error = "".join(f"    line {i} of a very long error message {'y' * 1000}\n" for i in range(1500))
    short_error = "    one line\n"
    blocks = [f"not ok {i} - test {i}\n  ---\n  error: |-\n{huge_error if i < 3 else short_error}  ...\n"
              for i in range(120)]
    log.write_text("TAP version 13\n" + "".join(blocks))
    failures = scan_log_failures(log)
    assert len(failures) == MAX_FAILURES and failures[-1].test == f"test {MAX_FAILURES - 1}"
    assert all(len(f.text) <= FAILURE_TEXT_LIMIT and len(f.message) <= 500 for f in failures)
    assert "line 0 of" in failures[0].text and "line 1499 of" in failures[0].text and "elided" in failures[0].text
    assert scan_log_failures(tmp_path / "missing.log") == []


def test_gate_without_junit_failures_falls_back_to_the_log(tmp_path: Path, env: dict[str, str]) -> None:
    command = "echo 'FAILED tests/test_a.py::test_a - assert 1 == 2'; exit 1"
    spec = GateSpec(name="t", command=command, junit=".prime-ci/none.xml")
    result = asyncio.run(run_gate(spec, cwd=tmp_path, env=env, log_dir=tmp_path / "logs", limits=Limits()))
    assert result.failures_source == "log" and [f.test for f in result.failures] == ["tests/test_a.py::test_a"]
    ok = asyncio.run(run_gate(GateSpec(name="ok", command="true"), cwd=tmp_path, env=env, log_dir=tmp_path / "l",
                              limits=Limits()))
    assert ok.failures == [] and ok.failures_source is None
