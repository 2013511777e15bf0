"""Issue 24 item 9: a bench suite's task_file (its text is sent to the model) must lie in the suite's directory,
symlinks resolved, unless the operator allows another directory with --task-files-from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import cli_inproc
from prime_ci.bench.suite import load_suite
from prime_ci.errors import ConfigError


def suite(tmp_path: Path, task_file: str) -> Path:
    (tmp_path / "suite" / "tasks").mkdir(parents=True)
    (tmp_path / "suite" / "tasks" / "inside.md").write_text("fix the bug\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text("the operator's private notes\n")
    os.symlink(tmp_path / "outside" / "secret.md", tmp_path / "suite" / "tasks" / "link.md")
    path = tmp_path / "suite" / "suite.toml"
    path.write_text(f'[[task]]\nid = "t"\nrepo = "."\ntask_file = "{task_file}"\n')
    return path


def test_a_task_file_inside_the_suite_is_read(tmp_path: Path) -> None:
    (task,) = load_suite(suite(tmp_path, "tasks/inside.md")).tasks
    assert task.text() == "fix the bug\n"


@pytest.mark.parametrize("task_file", ["../outside/secret.md", "tasks/link.md", "ABSOLUTE"])
def test_a_task_file_outside_the_suite_is_refused(tmp_path: Path, task_file: str) -> None:
    if task_file == "ABSOLUTE":
        task_file = str(tmp_path / "outside" / "secret.md")
    path = suite(tmp_path, task_file)
    with pytest.raises(ConfigError, match=r"outside the suite's directory.*--task-files-from"):
        load_suite(path)
    (task,) = load_suite(path, task_roots=[tmp_path / "outside"]).tasks  # the operator's opt-in
    assert task.text() == "the operator's private notes\n"


def test_the_cli_exits_2_before_any_run(tmp_path: Path) -> None:
    path = suite(tmp_path, "tasks/link.md")
    proc = cli_inproc(["bench", str(path), "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1",
                    "--out", str(tmp_path / "bench")], cwd=tmp_path)
    assert proc.returncode == 2 and "--task-files-from" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "bench" / "runs").exists()
