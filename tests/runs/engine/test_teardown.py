"""Issue 23 item 6: removing the worktree (a node_modules tree, a package store) is part of the run: it
happens before result.json and the final line, is counted in wall_s, and is said."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, reply

MAKE_TREE = ("python -c \"import os\nfor i in range(6000):\n    d = f'node_modules/.pnpm/p{i // 20}/lib'\n"
             "    os.makedirs(d, exist_ok=True)\n    open(f'{d}/f{i % 20}.js', 'w').close()\"")


def test_worktree_removal_is_said_and_counted_before_the_final_line(
    tmp_path: Path, server: ScriptedServer
) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(reply("nothing to do"))
    run = run_inproc(tmp_path, repo, server, "--setup", MAKE_TREE)
    assert run.code == 0, run.proc.stderr
    lines = run.proc.stderr.strip().splitlines()
    said = next(i for i, line in enumerate(lines) if "worktree removed:" in line)
    match = re.search(r"worktree removed: (\d+) entries in ([\d.]+)s", lines[said])
    assert match is not None and int(match.group(1)) > 6000, lines[said]
    assert "completed (exit 0)" in lines[-1] and said < len(lines) - 1
    assert run.result["wall_s"] >= float(match.group(2)), "the removal is inside the run's wall time"
