"""A real worktree, a judge with builds and gates, and the agent loop driven by a scripted model: the rounds the build
tests go through."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from cext_project import BUILD, FILES, GATE
from conftest import make_repo
from prime_ci.gates.builds import Builder
from prime_ci.gates.judge import Judge
from prime_ci.gates.specs import collect_builds, gates_from_commands
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.isolation.worktree import Worktree, create_worktree
from prime_ci.loop.agent import Agent, Stop
from prime_ci.loop.budget import Budget, Limits
from prime_ci.session.log import SessionLog
from prime_ci.testing.fakes import FakeExecutor, ScriptedModel


def worktree(tmp_path: Path, files: dict[str, str] = FILES) -> Worktree:
    repo = make_repo(tmp_path / "repo", files)
    wt = create_worktree(str(repo), None, parent=tmp_path)
    wt.excludes = [".prime-ci"]
    return wt


def gate_env(tmp_path: Path) -> dict[str, str]:
    """``python`` is the interpreter running the tests (it has setuptools and pytest), as a job's PATH would say."""
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)]),
            "HOME": str(tmp_path / "home"), "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}


def judge_for(tmp_path: Path, wt: Worktree, gate: str = GATE, builds: tuple[str, ...] = (BUILD,)) -> Judge:
    out, env = tmp_path / "out", gate_env(tmp_path)
    log = SessionLog.create(out / "session.jsonl", cwd=str(tmp_path))
    builder = Builder(collect_builds(list(builds), []), wt, env, out / "build", BoxLimits(), exclude=[".prime-ci"])
    return Judge(gates_from_commands([gate]), wt, env, out / "gates", log, 3, exclude=[".prime-ci"],
                 limits=BoxLimits(), builds=builder)


def drive(judge: Judge, model: ScriptedModel, kernel: FakeExecutor) -> Stop:
    async def go() -> Stop:
        assert judge.builds is not None
        await judge.builds.start()
        agent = Agent(model, kernel, Budget(Limits()), judge.log, judge, cell_timeout=300.0)
        agent.conversation.add({"role": "system", "content": "system prompt"})
        agent.give_task("Fix add in fastcalc/_calc.c.")
        return await agent.run()

    return asyncio.run(go())


def feedback(model: ScriptedModel, call: int) -> str:
    content = model.calls[call].messages[-1]["content"]
    assert isinstance(content, str)
    return content
