"""The bench driver's own overhead per task (issue 18), against a raw floor measured in the same run. Not a test.

    python benchmarks/bench_driver.py [--tasks 6] [--repeat 3] [--json FILE]

The floor runs the very `prime-ci run` commands the bench would start (the same argv, built by the bench's
own planner) one after another from a plain loop; the bench runs the same suite with `--jobs 1`. The
difference per task is what the driver adds: planning, harness and repository preparation, spawning,
reading results, verdicts without hidden tests, records, and the report. It is reported as a share of a
task's wall time (the floor's mean), with the median over the repeats; floor and bench alternate order.

That difference of two totals is as noisy as the runs themselves (a run's wall clock varies by a second on a
shared 2-core machine), so the driver's own time is also read directly: the bench's wall clock minus the time
its run processes were alive (``process_s`` in each record, measured by the driver around each subprocess;
``--jobs 1``, so they never overlap).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prime_ci.bench.driver import Plan
from prime_ci.bench.preflight import harness_states, materialize
from prime_ci.bench.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "prime_ci" / "demo"
PRIME_CI = shutil.which("prime-ci", path=os.path.dirname(sys.executable)) or "prime-ci"
TASK = "The test suite of this repository fails. Find the bug in calc.py and fix it; keep the tests as they are."


def make_suite(root: Path, tasks: int) -> Path:
    (root / "rec").mkdir(parents=True)
    shutil.copy(DEMO / "session.jsonl", root / "rec" / "session.jsonl")
    shutil.copytree(DEMO / "repo", root / "calc")
    rows = "".join(f'[[task]]\nid = "t{i}"\nrepo = "calc"\n\n' for i in range(tasks))
    (root / "suite.toml").write_text(
        f'[defaults]\ngates = ["python -m pytest -q"]\npython = "{{python}}"\nreplay = "rec"\ntask = "{TASK}"\n\n'
        + rows)
    return root / "suite.toml"


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    e["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), e.get("PATH", "")])
    return e


def floor(suite: Path, out: Path) -> float:
    """The same runs, from a plain loop: the argv the bench's planner makes, on the same git repository."""
    plan = Plan(load_suite(suite), out, harness_states(out, [], Path(".")), None, None)
    materialize(plan)
    started = time.monotonic()
    for job in plan.jobs():
        subprocess.run(plan.argv(job, None), env=env(), stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return time.monotonic() - started


def bench(suite: Path, out: Path) -> float:
    started = time.monotonic()
    subprocess.run([PRIME_CI, "bench", str(suite), "--jobs", "1", "--out", str(out)], env=env(),
                   stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return time.monotonic() - started


def outside_runs(out: Path, bench_s: float) -> float:
    """The bench's time outside its run processes (and hidden checks: none in this suite)."""
    report = json.loads((out / "bench.json").read_text())
    return bench_s - sum(t["process_s"] for t in report["tasks"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    samples: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="prime-ci-benchdrv-") as tmp:
        suite = make_suite(Path(tmp) / "suite", args.tasks)
        for r in range(args.repeat):
            order = ("floor", "bench") if r % 2 == 0 else ("bench", "floor")
            times = {}
            for what in order:
                out = Path(tmp) / f"{what}-{r}"
                times[what] = floor(suite, out) if what == "floor" else bench(suite, out)
            task = times["floor"] / args.tasks
            per_task = (times["bench"] - times["floor"]) / args.tasks
            own = outside_runs(Path(tmp) / f"bench-{r}", times["bench"]) / args.tasks
            samples.append({"floor_s": times["floor"], "bench_s": times["bench"], "task_s": task,
                            "overhead_per_task_s": per_task, "overhead_share": per_task / task,
                            "own_per_task_s": own, "own_share": own / task})
            print(f"repeat {r + 1}: floor {times['floor']:.2f}s, bench {times['bench']:.2f}s for {args.tasks} tasks: "
                  f"{per_task * 1000:+.0f} ms per task = {per_task / task:+.1%} of a task ({task:.2f}s); "
                  f"outside the runs: {own * 1000:.0f} ms per task = {own / task:.1%}")
    share = statistics.median(s["overhead_share"] for s in samples)
    per_task = statistics.median(s["overhead_per_task_s"] for s in samples)
    own_share = statistics.median(s["own_share"] for s in samples)
    own = statistics.median(s["own_per_task_s"] for s in samples)
    print(f"\nbench driver overhead (bench - floor): {per_task * 1000:+.0f} ms per task, {share:+.1%} of a demo task's "
          f"wall time; the driver's own time outside the runs: {own * 1000:.0f} ms per task, {own_share:.1%} "
          f"(medians of {args.repeat}; target < 5 %)")
    if args.json:
        args.json.write_text(json.dumps({"samples": samples, "median_share": share, "median_own_share": own_share,
                                         "median_overhead_per_task_s": per_task}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
