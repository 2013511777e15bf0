"""Issue 18 acceptance 1 and 2: ``prime-ci bench --demo`` offline, its report, the A/B of the bundled harness
states, and an A/B of identical harnesses (no difference, no flips)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema

from conftest import PRIME_CI, run_cli
from prime_ci.bench.model import BenchReport
from prime_ci.bench.suite import load_suite
from prime_ci.bench_demo import ROOT, harness_dirs


def test_bench_demo_runs_offline_with_the_whole_report(tmp_path: Path) -> None:
    proc = run_cli(["bench", "--demo", "--out", "demo", "--jobs", "2"], cwd=tmp_path, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "demo"
    data = json.loads((out / "bench.json").read_text())
    schema = json.loads(subprocess.run([PRIME_CI, "schema", "bench"], capture_output=True, text=True,
                                       check=True).stdout)
    jsonschema.validate(data, schema)
    report = BenchReport.model_validate(data)
    suite = load_suite(ROOT / "suite.toml")
    assert report.recorded and report.model is None
    assert [h.harness for h in report.harnesses] == ["base", "refined"]
    assert {t.id for t in report.tasks} == {t.id for t in suite.tasks} and len(report.tasks) == 2 * len(suite.tasks)
    for task in report.tasks:
        run = out / task.run_dir
        for name in ("result.json", "session.jsonl", "summary.md", "patch.diff", "junit.xml", "cells.ipynb"):
            assert (run / name).is_file(), f"{task.id}@{task.harness}: {name} missing"
        assert task.cost_usd is not None and task.cost_usd > 0, "the recordings carry their costs"
        assert task.total_tokens > 0 and task.wall_s > 0
        assert (task.time_to_green_s is not None) == bool(task.gates_passed)
    kinds = {t.id: t for t in report.tasks if t.harness == "base"}
    assert list((out / kinds["sales-summary"].run_dir / "children").glob("*/session.jsonl")), "a sub-agent ran"
    unsolved = {"base": {"preview-truncate", "till-rounding"}, "refined": {"till-rounding", "tag-order"}}
    for task in report.tasks:  # what each recording was made to show (scripts/record_bench_demo.py)
        assert task.solved == (task.id not in unsolved[task.harness]), (task.id, task.harness, task.stop_reason)
    assert report.solve_rate == 6 / 8
    comparison = report.comparison
    assert comparison is not None and comparison.pairs == len(suite.tasks)
    assert {(f.baseline, f.candidate) for f in comparison.flips} == {(False, True), (True, False)}
    assert 0 < comparison.p_value <= 1
    markdown = (out / "bench.md").read_text()
    assert "recorded sessions (replay)" in markdown
    assert "(95 % CI" in markdown and "p = " in markdown and "### A/B" in markdown
    assert "time-to-green" in markdown and "| cost |" in markdown.replace("cost | tokens", "| cost |")
    hidden = next(t for t in report.tasks if t.id == "preview-truncate" and t.harness == "base")
    assert hidden.gates_passed and not hidden.solved and hidden.hidden is not None and hidden.hidden.failing


def test_identical_harnesses_differ_by_nothing(tmp_path: Path) -> None:
    base = harness_dirs()[0]
    proc = run_cli(["bench", "--demo", "--harness", base, "--harness", base, "--shard", "4/4", "--out", "same",
                    "--max-regression", "0"], cwd=tmp_path, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    report = BenchReport.model_validate_json((tmp_path / "same" / "bench.json").read_bytes())
    comparison = report.comparison
    assert comparison is not None and comparison.pairs >= 2
    assert comparison.baseline == "base" and comparison.candidate == "base-2"
    assert comparison.difference == 0 and comparison.flips == [] and comparison.p_value == 1.0
    assert "No task flips" in (tmp_path / "same" / "bench.md").read_text()
    assert [t.passed for t in report.thresholds] == [True]
