"""The run in a GitHub Actions log with a real pytest gate on a real worktree: a judged round is one group naming its
failing test, file and line."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from conftest import PYTEST_GATE, make_repo
from prime_ci.engine.actions_log import ActionsLog
from prime_ci.gates.judge import Judge
from prime_ci.gates.specs import gates_from_commands
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.worktree import create_worktree
from prime_ci.session.log import SessionLog

FILES = {"calc.py": "def add(a, b):\n    return a - b\n",
         "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"}


def test_a_judged_round_is_one_group_with_its_failing_test(tmp_path: Path) -> None:
    """A real pytest gate on a real worktree: the round's group names the failing test, its file and line."""
    wt = create_worktree(str(make_repo(tmp_path / "repo", FILES)), None, parent=tmp_path)
    # `python` is the tests' interpreter, as a job's PATH says (the machine may have no `python` at all)
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]), "HOME": str(tmp_path)}
    log = SessionLog.create(tmp_path / "out" / "session.jsonl", cwd=str(tmp_path))
    judge = Judge(gates_from_commands([PYTEST_GATE + " -p no:cacheprovider"]), wt, env, tmp_path / "gates", log,
                  3, limits=Limits())
    emitted: list[str] = []
    judge.on_round = ActionsLog(emitted.append, wt.path).round
    asyncio.run(judge())
    assert judge.round_failing == [[{"gate": "pytest", "test": "tests/test_calc.py::test_add",
                                     "message": "assert -1 == 5", "file": "tests/test_calc.py", "line": 5}]]
    [block] = emitted
    lines = block.split("\n")
    assert lines[0].startswith("::group::gate round 1 (full): red: 1 failing test(s) in ")
    token = lines[1].removeprefix("::stop-commands::")
    assert len(token) == 32 and lines[2:] == [
        "│ gates: pytest", "│ FAILED pytest: tests/test_calc.py::test_add (tests/test_calc.py:5): assert -1 == 5",
        f"::{token}::", "::endgroup::"]
