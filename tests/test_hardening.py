"""Issue 17: hostile repository settings, bad inputs and edges that must end with their documented exit code,
one clear line and nothing left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo, run_cli, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply

LOCAL = ["--model", "openai/scripted", "--api-base", "http://127.0.0.1:9/v1"]


def private_tmp(tmp_path: Path) -> dict[str, str]:
    """A TMPDIR of the test's own, where prime-ci makes its worktrees: a leak shows there."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp_path / "tmp")}


@pytest.mark.parametrize(("setting", "key"), [
    ('untrusted-file = "/etc/hostname"', "untrusted-file"),
    ('task-file = "README.md"', "task-file"),
    ('task = "exfiltrate"', "task"),
    ('model = "anthropic/claude-sonnet-4-5"', "model"),
    ("max-tokens = 5000000", "max-tokens"),
    ('max-wall = "3h"', "max-wall"),
    ("max-children = 64", "max-children"),
    ("refine = true", "refine"),
])
def test_repository_settings_cannot_choose_the_model_the_task_or_raise_budgets(
        tmp_path: Path, setting: str, key: str) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "prime-ci.toml": setting + "\n"})
    proc = run_cli(["run", str(repo), "--task", "x", *LOCAL, "--out", str(tmp_path / "out")], cwd=tmp_path,
                   env=private_tmp(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert key.replace("-", "_") in proc.stderr.replace("-", "_"), proc.stderr
    assert not (tmp_path / "out").exists() and not list((tmp_path / "tmp").iterdir())


def test_repository_settings_may_lower_budgets(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "prime-ci.toml": "max-turns = 1\nmax-tokens = 900000\n"})
    with ScriptedServer([reply("done")]) as srv:
        run = run_prime(tmp_path, repo, srv)
    assert run.code == 0, run.proc.stderr
    assert run.result["budgets"]["max_turns"] == 1 and run.result["budgets"]["max_tokens"] == 900000
    # the operator's own flag is what a repository value is compared with
    with ScriptedServer([reply("done")]) as srv:
        raised = run_prime(tmp_path, repo, srv, "--max-tokens", "500000")
    assert raised.code == 0 and raised.result["budgets"]["max_tokens"] == 500000


@pytest.mark.parametrize("task", ["", "   \n\t ", "\x00\x01\x02binary\x00"])
def test_empty_and_binary_tasks_exit_2(tmp_path: Path, buggy_repo: Path, task: str) -> None:
    proc = run_cli(["run", str(buggy_repo), "--task", task.replace("\x00", "\x01"), *LOCAL], cwd=tmp_path)
    assert proc.returncode == 2 and "task" in proc.stderr.strip().splitlines()[-1], proc.stderr
    task_file = tmp_path / "task.bin"
    task_file.write_bytes(task.encode() + bytes(range(256)) * 4 if task.strip() else task.encode())
    proc = run_cli(["run", str(buggy_repo), "--task-file", str(task_file), *LOCAL], cwd=tmp_path)
    assert proc.returncode == 2 and "--task-file" in proc.stderr, proc.stderr


def test_an_unknown_provider_exits_2_before_cloning(tmp_path: Path) -> None:
    proc = run_cli(["run", str(tmp_path / "no-such-repo"), "--task", "x", "--model", "foo/bar"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "unknown provider 'foo'" in last and "no-such-repo" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("path", ["tests/ünï/conftest.py", "sub dir/\"q\"/conftest.py", "pytest.toml",
                                  ".pytest.ini", ".pytest.toml", "gates.toml"])
def test_protected_path_bypasses_are_a_security_stop(tmp_path: Path, path: str) -> None:
    gates = '[[gate]]\nname = "t"\ncommand = "python -m pytest -q"\n'
    repo = make_repo(tmp_path / "repo", {**BUGGY, "gates.toml": gates})
    cell = f"import pathlib\np = pathlib.Path({path!r})\np.parent.mkdir(parents=True, exist_ok=True)\n" \
           "p.write_text('# changed\\n')\n"
    with ScriptedServer([ipython(cell), reply("done")]) as srv:
        run = run_prime(tmp_path, repo, srv, "--gates-file", "./gates.toml", "--max-gate-retries", "0")
    assert run.code == 7, run.proc.stderr
    assert run.result["stop_reason"] == "security_stop"
    assert path in run.result["changed_files"] and path in run.result["detail"]


def test_a_filter_driver_planted_in_the_clones_config_never_runs_on_the_host(tmp_path: Path,
                                                                              buggy_repo: Path) -> None:
    marker = tmp_path / "PWNED"
    cell = ("import subprocess, pathlib\n"
            "pathlib.Path('.gitattributes').write_text('*.py filter=evil\\n')\n"
            f"subprocess.run(['git', 'config', 'filter.evil.clean', 'touch {marker}; cat'], check=True)\n"
            "subprocess.run(['git', 'config', 'filter.Evil2.smudge', 'touch {marker}; cat'], check=True)\n"
            "pathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n")
    with ScriptedServer([ipython(cell), reply("done")]) as srv:
        # a gate that runs no git itself (pytest-benchmark would, and a gate is the project's own code anyway)
        run = run_prime(tmp_path, buggy_repo, srv, "--sandbox", "off", "--gate",
                        "python -c 'import calc; assert calc.add(2, 3) == 5'")
    assert run.code == 0, run.proc.stderr
    assert not marker.exists(), "the host ran the kernel's filter driver"
    assert "return a + b" in (run.out / "patch.diff").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the repository to another user")
def test_a_repository_owned_by_another_user_keeps_gits_reason_whole(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 65534, 65534)
    proc = run_cli(["run", str(repo), "--task", "x", *LOCAL], cwd=tmp_path, env=private_tmp(tmp_path))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "dubious ownership" in last and "safe.directory" in last, proc.stderr
    assert not list((tmp_path / "tmp").iterdir())
