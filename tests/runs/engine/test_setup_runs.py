"""Issue 13: the setup phase, uncommitted state in REPO, presets on a fresh worktree, --gates-from a local branch,
in process (run_inproc)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from conftest import BUGGY, FIX, make_repo, run_inproc
from prime_ci.artifacts.schemas import ResultModel
from prime_ci.testing import ScriptedServer, ipython, reply

GATES = Path(__file__).resolve().parents[3] / "gates"


def test_failing_setup_stops_before_any_model_call(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    setup = tmp_path / "setup.toml"
    setup.write_text('[[setup]]\nname = "deps"\ncommand = "echo preparing; echo no such package >&2; exit 3"\n'
                     '[[gate]]\nname = "tests"\ncommand = "python -m pytest -q"\n')
    run = run_inproc(tmp_path, buggy_repo, server, "--setup", "echo first step ok", "--gates-file", str(setup))
    assert run.code == 9, run.proc.stderr
    assert server.chat_requests == [], "no model request may be made when setup fails"
    result = ResultModel.model_validate(run.result)
    assert result.stop_reason == "setup_failed" and not result.success
    assert "deps" in run.result["detail"] and "exit 3" in run.result["detail"]
    assert [(s["name"], s["passed"]) for s in run.result["setup"]] == [("echo", True), ("deps", False)]
    log = (run.out / "setup" / "deps.log").read_text()
    assert "preparing" in log and "no such package" in log
    summary = (run.out / "summary.md").read_text()
    assert "setup_failed" in summary and "setup `deps` failed" not in summary and "(log: setup/deps.log)" in summary
    assert "echo preparing; echo no such package" in summary
    assert "setup deps: FAILED (exit 3)" in run.proc.stderr
    assert (run.out / "session.jsonl").is_file() and (run.out / "junit.xml").is_file()


def test_setup_sees_no_secrets_and_has_the_project_path(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.add(ipython("import os; print('kernel NO_COLOR', os.environ.get('NO_COLOR'))"), reply("nothing to do"))
    run = run_inproc(tmp_path, buggy_repo, server, "--setup", "env > .prime-ci/setup-env.txt; command -v python",
                    "--keep-worktree")
    assert run.code == 0, run.proc.stderr
    env_dump = (Path(run.result["worktree"]) / ".prime-ci" / "setup-env.txt").read_text()
    assert "sk-test-canary" not in env_dump and "OPENAI_API_KEY" not in env_dump
    # setup and gates see the project's CI environment; only the model's cells have colour turned off
    assert not [line for line in env_dump.splitlines() if line.startswith(("NO_COLOR=", "FORCE_COLOR=", "CLICOLOR="))]
    assert "kernel NO_COLOR 1" in json.dumps(server.chat_requests[-1].body["messages"])
    assert "/env/bin/python" in next((run.out / "setup").glob("*.log")).read_text()
    shutil.rmtree(Path(run.result["worktree"]).parent, ignore_errors=True)


def test_uncommitted_config_warns_and_include_dirty_uses_it(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    (buggy_repo / "prime-ci.toml").write_text('gate = ["python -m pytest -q -p no:cacheprovider"]\n')
    server.add(reply("nothing to do"))
    plain = run_inproc(tmp_path, buggy_repo, server)
    assert plain.code == 0, plain.proc.stderr
    warnings = [line for line in plain.proc.stderr.splitlines() if "uncommitted changes" in line]
    assert len(warnings) == 1 and "prime-ci.toml" in warnings[0] and "--include-dirty" in warnings[0]
    assert plain.result["gates"] == [] and plain.result["dirty"] == ["prime-ci.toml"]
    assert "uncommitted changes" in (plain.out / "summary.md").read_text()

    server.add(ipython(FIX), reply("fixed"))
    dirty = run_inproc(tmp_path, buggy_repo, server, "--include-dirty")
    assert dirty.code == 0, dirty.proc.stderr
    assert [g["name"] for g in dirty.result["gates"]] == ["pytest"], "the uncommitted setting took effect"
    assert dirty.result["changed_files"] == ["calc.py"], "the snapshot is the base: only the model's change"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=buggy_repo, capture_output=True, text=True).stdout
    assert dirty.result["snapshot_of"] == head.strip() != dirty.result["base_commit"]
    assert (buggy_repo / "prime-ci.toml").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=buggy_repo, capture_output=True, text=True).stdout
    assert status == "?? prime-ci.toml\n", "REPO is untouched"


def test_benchmark_preset_on_a_fresh_worktree(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", {
        "fast.py": "def work():\n    return sum(range(100))\n",
        "benchmarks/test_speed.py": "from fast import work\n\n\ndef test_work(benchmark):\n"
                                    "    assert benchmark(work) == 4950\n",
        "benchmarks/conftest.py": "import sys, os\nsys.path.insert(0, os.getcwd())\n",
        "tools/benchmark_threshold.py": (GATES / "benchmark_threshold.py").read_text(),
        ".gitignore": ".prime-ci/\n__pycache__/\n.benchmarks/\n",
    })
    server.add(reply("nothing to change"))
    run = run_inproc(tmp_path, repo, server, "--gates-file", str(GATES / "benchmark.toml"))
    assert run.code == 0, (run.out / "gates" / "benchmark.log").read_text()
    assert run.result["gates"][0]["name"] == "benchmark" and run.result["gates"][0]["passed"]
    assert run.result["changed_files"] == []


def test_gates_from_a_local_branch(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "gates.toml": '[[gate]]\nname = "base"\ncommand = "exit 0"\n'})
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "branch", "trusted-base"], cwd=repo, check=True)
    (repo / "gates.toml").write_text('[[gate]]\nname = "pr"\ncommand = "exit 0"\n')
    make_repo(repo, {}, message="pr changes the gates")
    server.add(reply("done"))
    run = run_inproc(tmp_path, repo, server, "--gates-file", str(repo / "gates.toml"), "--gates-from", "trusted-base")
    assert run.code == 0, run.proc.stderr
    assert [g["name"] for g in run.result["gates"]] == ["base"]


def test_setup_tables_in_prime_ci_toml(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "prime-ci.toml": (
        'gate = ["test -f .prime-ci/ready"]\n\n'
        '[[setup]]\nname = "prepare"\ncommand = "echo prepared > .prime-ci/ready"\nnetwork = false\ntimeout = "1m"\n')})
    server.add(reply("done"))
    run = run_inproc(tmp_path, repo, server)
    assert run.code == 0, run.proc.stderr
    assert [(s["name"], s["passed"]) for s in run.result["setup"]] == [("prepare", True)]
    assert run.result["gates"][0]["passed"]
