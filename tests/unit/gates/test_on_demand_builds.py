"""The kernel's on-demand ``gates.run()`` starts with the builds, as every round does (issue 40): the gates test
what the sources build to now, not the output of the last round's build."""

from __future__ import annotations

import asyncio
from pathlib import Path

from unit.gates.build_rounds import judge_for, worktree


def test_an_on_demand_round_builds_before_its_gate(tmp_path: Path) -> None:
    wt = worktree(tmp_path, {"src.txt": "old\n", ".gitignore": "built.txt\n"})
    judge = judge_for(tmp_path, wt, gate='test "$(cat built.txt)" = new', builds=("cp src.txt built.txt",))
    [gate] = judge.specs

    async def go() -> None:
        assert judge.builds is not None
        await judge.builds.start()  # the run's first build: built.txt says "old"
        (wt.path / "src.txt").write_text("new\n")  # the model's edit, then its gates.run(name) from the kernel
        [result] = await judge.run_round(only=gate.name)
        assert result.passed, "the gate ran against the previous build's output"
        assert judge.round_log[-1]["on_demand"] is True

    asyncio.run(go())
