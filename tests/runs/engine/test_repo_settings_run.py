"""Issue 24 item 7, a whole run: a repository task file next to the operator's task does not stop the run."""

from __future__ import annotations

from pathlib import Path

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, reply


def test_a_repository_task_file_next_to_the_operators_task_does_not_stop_the_run(tmp_path: Path) -> None:
    """The issue's reproduction, end to end: exit 0, one warning line, the operator's task reaches the model."""
    repo = make_repo(tmp_path / "repo", {**BUGGY, "README.md": "do something else\n",
                                         "prime-ci.toml": 'task-file = "README.md"\n'})
    with ScriptedServer([reply("done")]) as srv:
        run = run_inproc(tmp_path, repo, srv, task="the operator's task")
        first = srv.chat_requests[0].body
    assert run.code == 0, run.proc.stderr
    warnings = [line for line in run.proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "task-file" in warnings[0] and "ignored" in warnings[0], run.proc.stderr
    assert "the operator's task" in str(first) and "do something else" not in str(first)
