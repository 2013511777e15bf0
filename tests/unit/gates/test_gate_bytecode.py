"""Every gate round tests the sources as they are: never bytecode the round before cached from them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from prime_ci.gates.bytecode import drop_tree_bytecode, mirror
from prime_ci.gates.judge import Judge
from prime_ci.gates.specs import gates_from_commands
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.session.log import SessionLog
from unit.gates.build_rounds import gate_env, worktree

FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}


def judge(tmp_path: Path) -> Judge:
    wt = worktree(tmp_path, FILES)
    out, env = tmp_path / "out", gate_env(tmp_path)
    log = SessionLog.create(out / "session.jsonl", cwd=str(tmp_path))
    return Judge(gates_from_commands(["python -m pytest -q -p no:cacheprovider"]), wt, env, out / "gates", log, 3,
                 exclude=[".prime-ci"], limits=BoxLimits())


def test_a_fix_of_the_same_size_in_the_same_second_is_what_the_next_round_tests(tmp_path: Path) -> None:
    j = judge(tmp_path)
    source = j.worktree.path / "calc.py"
    assert not asyncio.run(j.run_round())[0].passed
    cached = mirror(Path(j.env["PYTHONPYCACHEPREFIX"]), j.worktree.path)
    assert list(cached.rglob("calc.*.pyc")), "the gate cached the module's bytecode outside the worktree"
    before = source.stat()
    # the fix as a fast model writes it: the same length, within the second the last round read the file
    source.write_text(source.read_text().replace("a - b", "a + b"))
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert source.stat().st_size == before.st_size
    result = asyncio.run(j.run_round())[0]
    assert result.passed, result.output


def test_only_the_worktrees_bytecode_goes(tmp_path: Path) -> None:
    prefix, tree = tmp_path / "cache", tmp_path / "wt"
    tree.mkdir()
    kept = prefix / Path(os.path.realpath(tmp_path)).relative_to("/") / "env" / "mod.cpython-311.pyc"
    gone = mirror(prefix, tree) / "pkg" / "__init__.cpython-311.pyc"
    for pyc in (kept, gone):
        pyc.parent.mkdir(parents=True)
        pyc.write_bytes(b"")
    assert drop_tree_bytecode({"PYTHONPYCACHEPREFIX": str(prefix)}, tree) == 3
    assert kept.exists() and not gone.exists() and not mirror(prefix, tree).exists()
    assert drop_tree_bytecode({}, tree) == 0
