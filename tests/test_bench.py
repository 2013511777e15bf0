"""Issue 18: ``prime-ci bench`` — suites run as ordinary runs, verdicts, shards and merge, resumability,
SWE-bench instance files with hidden tests, thresholds. (The bundled demo suite: test_bench_demo.py.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import PRIME_CI, PYTEST_GATE, cli_inproc, live_processes_with, make_repo, run_cli, wait_until
from prime_ci.bench.model import BenchReport
from prime_ci.testing import ScriptedServer, ipython, reply

DEMO = Path(__file__).resolve().parents[1] / "src" / "prime_ci" / "demo"
TASK = "The test suite of this repository fails. Find the bug in calc.py and fix it; keep the tests as they are."


def replay_suite(root: Path, ids: list[str], *, extra: str = "") -> Path:
    """A suite of copies of the bundled demo task (a plain directory repository and its recorded session)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "rec").mkdir(exist_ok=True)
    shutil.copy(DEMO / "session.jsonl", root / "rec" / "session.jsonl")
    shutil.copytree(DEMO / "repo", root / "calc", dirs_exist_ok=True)
    tasks = "".join(f'[[task]]\nid = "{i}"\nrepo = "calc"\n{extra}\n' for i in ids)
    (root / "suite.toml").write_text(
        f'name = "replayed"\n[defaults]\ngates = ["{PYTEST_GATE}"]\npython = "{{python}}"\nmax_turns = 12\n'
        f'replay = "rec"\ntask = "{TASK}"\n\n{tasks}')
    return root / "suite.toml"


def bench(args: list[str], cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return run_cli(["bench", *args], cwd=cwd, timeout=600, **kw)


def bench_inproc(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``bench`` in this process: for a bench that runs nothing (refusals, merges)."""
    return cli_inproc(["bench", *args], cwd=cwd)


def report(out: Path) -> BenchReport:
    return BenchReport.model_validate_json((out / "bench.json").read_bytes())


def verdicts(r: BenchReport) -> list[tuple[str, str, int, bool, str]]:
    return [(t.id, t.harness, t.repeat, t.solved, t.stop_reason) for t in r.tasks]


def test_shards_then_merge_equal_one_unsharded_bench(tmp_path: Path) -> None:
    suite = replay_suite(tmp_path / "s", ["a", "b"])
    whole = bench([str(suite), "--out", "whole", "--jobs", "2"], tmp_path)
    assert whole.returncode == 0, whole.stderr
    shards = []
    for i in (1, 2):
        proc = bench([str(suite), "--shard", f"{i}/2", "--out", f"shard{i}", "--jobs", "1"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        part = report(tmp_path / f"shard{i}")
        assert part.shard == f"{i}/2" and len(part.tasks) == 1
        shards.append(part.tasks[0].id)
    assert sorted(shards) == ["a", "b"], "the shards must split the suite without overlap"
    merged = bench_inproc(["--merge", "shard1", "shard2", "--out", "merged"], tmp_path)
    assert merged.returncode == 0, merged.stderr
    one, joined = report(tmp_path / "whole"), report(tmp_path / "merged")
    assert verdicts(joined) == verdicts(one)
    assert joined.solve_rate == one.solve_rate and joined.suite.sha256 == one.suite.sha256
    assert joined.shard is None and len(joined.merged_from) == 2
    for task in joined.tasks:  # run directories stay in the shards; the merged report links them
        assert (tmp_path / "merged" / task.run_dir / "result.json").is_file()
    assert "2/2 = 100.0 %" in (tmp_path / "merged" / "bench.md").read_text()
    partial = bench_inproc(["--merge", "shard1", "--out", "partial", "--min-solve-rate", "1"], tmp_path)
    assert partial.returncode == 2 and "shard(s) 2/2 missing" in partial.stderr
    again = bench_inproc(["--merge", "shard1", "shard1", "shard2", "--out", "twice"], tmp_path)
    assert again.returncode == 2 and "shard 1/2 given twice" in again.stderr
    empty = bench_inproc([str(suite), "--shard", "3/3", "--out", "empty"], tmp_path)
    assert empty.returncode == 2 and "--shard 3/3 has no tasks: the suite has 2" in empty.stderr


def test_a_killed_bench_reruns_only_unfinished_tasks(tmp_path: Path) -> None:
    suite = replay_suite(tmp_path / "s", ["a", "b", "c"])
    out = tmp_path / "out"
    cmd = [PRIME_CI, "bench", str(suite), "--out", str(out), "--jobs", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = out / "records" / "default" / "a.json"
    wait_until(lambda: first.is_file() or proc.poll() is not None, timeout=300, what="the first finished task")
    wait_until(lambda: (out / "runs" / "default" / "b").is_dir() or proc.poll() is not None, timeout=120,
               what="the second run to start")
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    proc.kill()  # SIGKILL: no clean-up in the bench; its runs get SIGTERM from the kernel (PR_SET_PDEATHSIG)
    proc.wait()
    wait_until(lambda: not live_processes_with(str(out / "runs")), timeout=120, what="the orphaned run to end")
    assert not (out / "records" / "default" / "b.json").exists()
    stamp = first.stat().st_mtime_ns
    again = bench([str(suite), "--out", str(out), "--jobs", "1"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert first.stat().st_mtime_ns == stamp, "a finished task was run again"
    started = [line for line in again.stderr.splitlines() if "] " in line and "@default" in line]
    assert [line.split("] ", 1)[1].split(" ", 1)[0] for line in started] == ["b", "c"]
    r = report(out)
    assert [t.id for t in r.tasks] == ["a", "b", "c"] and all(t.solved for t in r.tasks)
    assert r.wall_s > sum(t.wall_s for t in r.tasks if t.id == "a"), "the killed part's time counts too"
    suite.write_text(suite.read_text().replace('id = "c"\n', 'id = "c"\nmax_turns = 11\n'))
    edited = bench([str(suite), "--out", str(out), "--jobs", "1"], tmp_path)
    assert edited.returncode == 0, edited.stderr
    assert "2 finished earlier" in edited.stderr and "] c @default" in edited.stderr
    assert "] a @default" not in edited.stderr and "] b @default" not in edited.stderr
    other = bench_inproc([str(suite), "--out", str(out), "--repeat", "2"], tmp_path)
    assert other.returncode == 2 and "holds another bench (repeat: 1 then, 2 now)" in other.stderr


def test_thresholds_fail_the_job(tmp_path: Path) -> None:
    suite = replay_suite(tmp_path / "s", ["ok", "short"])
    text = suite.read_text().replace('id = "short"\n', 'id = "short"\nmax_turns = 1\n')
    suite.write_text(text)
    proc = bench([str(suite), "--out", "o", "--min-solve-rate", "0.75", "--json"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["solve_rate"] == 0.5
    assert data["thresholds"] == [{"name": "min_solve_rate", "limit": 0.75, "value": 0.5, "passed": False}]
    short = next(t for t in data["tasks"] if t["id"] == "short")
    assert not short["solved"] and short["stop_reason"] == "max_turns"
    assert "max_turns" in (tmp_path / "o" / "bench.md").read_text()
    regression = bench_inproc([str(suite), "--out", "o2", "--max-regression", "0.1"], tmp_path)
    assert regression.returncode == 2 and "two or more --harness" in regression.stderr


def test_swe_bench_instance_with_a_local_mirror_keeps_the_hidden_tests_hidden(
    tmp_path: Path, server: ScriptedServer
) -> None:
    mirror = tmp_path / "mirror"
    make_repo(mirror / "acme__mathlib", {
        "mathlib/__init__.py": "", "mathlib/ops.py": "def clamp(x, lo, hi):\n    return max(lo, x)\n",
        "tests/test_ops.py": "from mathlib.ops import clamp\n\n\ndef test_low():\n    assert clamp(-1, 0, 5) == 0\n",
    })
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=mirror / "acme__mathlib", capture_output=True,
                          text=True, check=True).stdout.strip()
    hidden = ("diff --git a/tests/test_hidden.py b/tests/test_hidden.py\nnew file mode 100644\n"
              "--- /dev/null\n+++ b/tests/test_hidden.py\n@@ -0,0 +1,5 @@\n+from mathlib.ops import clamp\n+\n+\n"
              "+def test_high():\n+    assert clamp(9, 0, 5) == 5\n")
    instance = {"instance_id": "acme__mathlib-1", "repo": "acme/mathlib", "base_commit": base,
                "problem_statement": "clamp() ignores its upper bound: clamp(9, 0, 5) returns 9.",
                "FAIL_TO_PASS": json.dumps(["tests/test_hidden.py::test_high"]),
                "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_low"]), "test_patch": hidden,
                "python": sys.executable}
    (tmp_path / "swe.jsonl").write_text(json.dumps(instance) + "\n")
    server.add(
        ipython("import os; print('hidden visible:', os.path.exists('tests/test_hidden.py'))"),
        ipython("from pathlib import Path\np = Path('mathlib/ops.py')\n"
                "p.write_text(p.read_text().replace('max(lo, x)', 'min(hi, max(lo, x))'))"),
        reply("clamp() now honours hi."),
    )
    proc = bench(["swe.jsonl", "--mirror", str(mirror), "--model", "openai/scripted", "--api-base", server.url,
                  "--out", "o"], tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert proc.returncode == 0, proc.stderr
    r = report(tmp_path / "o")
    task = r.tasks[0]
    assert task.id == "acme__mathlib-1" and task.solved and not r.recorded
    assert task.hidden is not None and task.hidden.passed and "tests/test_hidden.py::test_high" in task.hidden.command
    tool_results = [m for req in server.chat_requests for m in req.body["messages"] if m.get("role") == "tool"]
    assert any("hidden visible: False" in str(m.get("content")) for m in tool_results)
    patch = (tmp_path / "o" / task.run_dir / "patch.diff").read_text()
    assert "test_hidden" not in patch and "min(hi, max(lo, x))" in patch
    seeds = {req.body.get("seed") for req in server.chat_requests}
    assert seeds == {task.seed}, "the recorded seed reaches the provider"
    assert "problem_statement" not in (tmp_path / "o" / task.run_dir / "session.jsonl").read_text()

    server.add(ipython("print('no change')"), reply("Nothing to do."))
    wrong = bench(["swe.jsonl", "--mirror", str(mirror), "--model", "openai/scripted", "--api-base", server.url,
                   "--out", "o2"], tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert wrong.returncode == 0, wrong.stderr
    failed = report(tmp_path / "o2").tasks[0]
    assert not failed.solved and failed.stop_reason == "completed"
    assert failed.hidden is not None and not failed.hidden.passed
    assert "tests/test_hidden.py::test_high" in failed.hidden.failing


@pytest.mark.parametrize(("suite", "message"), [
    ('[[task]]\nid = "x"\nrepo = "."\ntask = "t"\nbogus = 1\n', "bogus"),
    ('[[task]]\nid = "x"\nrepo = "."\ntask = "t"\n[[task]]\nid = "x"\nrepo = "."\ntask = "t"\n', "appears twice"),
    ('[[task]]\nid = "x"\nrepo = "nowhere"\ntask = "t"\n', "repository not found"),
    ('[[task]]\nid = "x"\nrepo = "."\n', "exactly one of task, task_file"),
    ('[[task]]\nid = "x"\nrepo = "."\ntask = "t"\n', "no model"),
])
def test_suite_errors_are_one_line_and_exit_2(tmp_path: Path, suite: str, message: str) -> None:
    (tmp_path / "s.toml").write_text(suite)
    proc = bench_inproc(["s.toml", "--out", "o"], tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_swe_bench_needs_a_mirror(tmp_path: Path) -> None:
    (tmp_path / "i.json").write_text(json.dumps([{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "x",
                                                  "problem_statement": "p"}]))
    assert "--mirror" in bench_inproc(["i.json"], tmp_path).stderr
    (tmp_path / "m").mkdir()
    proc = bench_inproc(["i.json", "--mirror", "m"], tmp_path)
    assert proc.returncode == 2 and "no local clone of a/b" in proc.stderr
    (tmp_path / "m" / "a__b").mkdir()
    (tmp_path / "bad.jsonl").write_text(json.dumps({"instance_id": "a__b-2", "repo": "a/b", "base_commit": "x",
                                                    "problem_statement": "p", "FAIL_TO_PASS": "[oops"}) + "\n")
    bad = bench_inproc(["bad.jsonl", "--mirror", "m"], tmp_path)
    assert bad.returncode == 2 and "FAIL_TO_PASS is not a JSON list" in bad.stderr and "Traceback" not in bad.stderr


def test_hidden_tests_that_cannot_run_give_no_verdict_and_run_again(tmp_path: Path) -> None:
    suite = replay_suite(tmp_path / "s", ["typo"], extra='fail_to_pass = ["test_calc.py::test_no_such_test"]')
    first = bench([str(suite), "--out", "o"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "1 run gave no verdict (hidden tests could not run)" in first.stderr
    [task] = report(tmp_path / "o").tasks
    assert not task.solved and task.hidden is not None and task.hidden.error is not None
    assert "pytest exit 4" in task.hidden.error and task.detail == task.hidden.error
    assert "hidden tests could not run" in (tmp_path / "o" / "bench.md").read_text()
    again = bench([str(suite), "--out", "o"], tmp_path)
    assert "] typo @default" in again.stderr and "finished earlier" not in again.stderr


def test_bench_schema_is_the_report_model() -> None:
    proc = subprocess.run([PRIME_CI, "schema", "bench"], capture_output=True, text=True, check=True)
    schema = json.loads(proc.stdout)
    assert schema == BenchReport.model_json_schema()
    assert {"solve_rate", "tasks"} <= set(schema["required"])
    task = schema["$defs"]["TaskResult"]["properties"]
    assert {"id", "solved", "stop_reason", "cost_usd", "total_tokens", "wall_s", "time_to_green_s",
            "run_dir"} <= set(task)


def test_sigterm_stops_the_bench_with_130(tmp_path: Path) -> None:
    suite = replay_suite(tmp_path / "s", ["a", "b"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    out = tmp_path / "out"
    proc = subprocess.Popen([PRIME_CI, "bench", str(suite), "--out", str(out), "--jobs", "1"], cwd=tmp_path,
                            env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = out / "logs" / "default" / "a.log"
    wait_until(lambda: (log.is_file() and "kernel ready" in log.read_text()) or proc.poll() is not None,
               timeout=120, what="the first run's kernel")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    assert "run the same command again" in (proc.stderr.read() if proc.stderr else "")
    assert not live_processes_with(str(out / "runs"))
    result = json.loads((out / "runs" / "default" / "a" / "result.json").read_text())
    assert result["stop_reason"] == "interrupted"


def test_refine_attaches_a_bench_ab_to_the_proposal(tmp_path: Path) -> None:
    from prime_ci.session.log import SessionLog

    suite = replay_suite(tmp_path / "s", ["a"])
    session = tmp_path / "session.jsonl"
    log = SessionLog.create(session, cwd=str(tmp_path))
    log.custom("prime_ci.run", {"run_id": "run-7", "task": TASK})
    seen = log.message("assistant", [{"type": "text", "text": "pytest needed a second look at calc.py."}])
    log.close()
    plan = {"rationale": "Read the code under test first.", "ops": [
        {"op": "create", "kind": "prompt", "name": "read-first", "content": "Read the code under test first.",
         "evidence": f"entry {seen}"}]}
    refiner = tmp_path / "refiner.jsonl"  # the refinement model's one reply, recorded
    rec = SessionLog.create(refiner, cwd=str(tmp_path))
    rec.message("assistant", [{"type": "toolCall", "id": "r1", "name": "submit_refinement", "arguments": plan}])
    rec.close()
    pr = tmp_path / "harness-pr.md"
    proc = run_cli(["refine", str(session), "--harness", str(tmp_path / "harness"), "--model", f"replay:{refiner}",
                    "--propose-to", str(pr), "--bench", str(suite), "--bench-out", str(tmp_path / "b")],
                   cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    body = pr.read_text()
    assert body.startswith("# Harness refinement proposal") and "Read the code under test first." in body
    assert "<!-- prime-ci bench -->" in body and "### A/B: `before` → `harness`" in body
    assert "No task flips" in body
    r = report(tmp_path / "b")
    assert [h.harness for h in r.harnesses] == ["before", "harness"] and r.comparison is not None
    assert (tmp_path / "b" / "harness" / "harness" / "prompts" / "read-first.md").is_file()
    assert not list((tmp_path / "b" / "harness" / "before").rglob("*.md")), "the baseline is the state before"
