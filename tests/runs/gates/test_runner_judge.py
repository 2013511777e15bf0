"""A unittest gate through the judge's rounds: the full round's failures, then a fast round of just those."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from conftest import repo_worktree
from prime_ci.gates.judge import Judge
from prime_ci.gates.specs import gates_from_commands
from prime_ci.isolation.limits import Limits
from prime_ci.session.log import SessionLog
from prime_ci.stops import Stop, StopReason

CODE = "def double(n):\n    return n * 3\n"
TESTS = (
    "import unittest\n\nfrom calc import double\n\n\n"
    "class TestDouble(unittest.TestCase):\n"
    "    def test_zero(self):\n        self.assertEqual(double(0), 0)\n\n"
    "    def test_one(self):\n        self.assertEqual(double(1), 2)\n\n"
    "    def test_two(self):\n        self.assertEqual(double(2), 4)\n"
)


def test_unittest_gate_fast_round_names_its_tests_and_what_it_dropped(tmp_path: Path) -> None:
    wt = repo_worktree(tmp_path, {"calc.py": CODE, "test_calc.py": TESTS})
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(wt.path))
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    judge = Judge(gates_from_commands(["python -m unittest -f"]), wt, env, tmp_path / "gates", log, 5,
                  limits=Limits())
    first = asyncio.run(judge())
    assert isinstance(first, str) and "failing tests (from the full log):" in first
    # -f stops at the first failure: the full round names one test
    assert "- test_calc.TestDouble.test_one: AssertionError: 3 != 2 (test_calc.py:11)" in first
    (wt.path / "calc.py").write_text("def double(n):\n    return n * 2 + (n == 1)\n")
    second = asyncio.run(judge())
    assert isinstance(second, str) and "fast rerun of the 1 previously failing test(s)" in second
    assert "The fast rerun of gate" in second and "left out -f" in second
    assert "- test_calc.TestDouble.test_one: AssertionError: 3 != 2 (test_calc.py:11)" in second
    fast_log = (tmp_path / "gates").glob("*.fast.log")
    assert "Ran 1 test" in next(fast_log).read_text()
    (wt.path / "calc.py").write_text("def double(n):\n    return n * 2\n")
    third = asyncio.run(judge())
    assert isinstance(third, Stop) and third.reason == StopReason.COMPLETED
    assert [r["kind"] for r in judge.round_log] == ["full", "fast", "fast", "full"]
