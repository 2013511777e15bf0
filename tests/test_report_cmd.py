"""Issue 8 acceptance 3: `prime-ci report` over three shard artifact dirs gives one summary with totals."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import PRIME_CI, PYTEST_GATE, built_once, run_cli
from prime_ci.artifacts.multireport import aggregate
from prime_ci.demo import demo_flags
from prime_ci.errors import ConfigError


def demo_args(flags: dict[str, Any], out: Path, *extra: str) -> list[str]:
    args = ["run", flags["repo"], "--task", flags["task"], "--model", flags["model"], "--out", str(out),
            "--max-wall", flags["max_wall"], "--sandbox", "off", "--python", flags["python"]]  # fmt: skip
    for gate in flags["gate"]:  # the demo's pytest gate, without the dev environment's plugins (PYTEST_GATE)
        args += ["--gate", gate.replace("python -m pytest -q", PYTEST_GATE, 1)]
    return [*args, *extra]


def _three_shards(root: Path) -> None:
    variants = {"a": ["--max-turns", "12"], "b": ["--max-gate-retries", "0"], "c": ["--max-turns", "1"]}
    cleanups, procs = [], []
    try:
        for name, extra in variants.items():
            flags, cleanup = demo_flags(None)
            cleanups.append(cleanup)
            procs.append(subprocess.Popen([PRIME_CI, *demo_args(flags, root / f"shard-{name}", *extra)], cwd=root,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
        codes = [p.wait(timeout=240) for p in procs]
        assert codes == [0, 1, 3], [p.stderr.read() if p.stderr else "" for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            for stream in (p.stdout, p.stderr):
                if stream:
                    stream.close()
        for cleanup in cleanups:
            cleanup()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three real runs of the demo, as three matrix shards would leave them: completed, gates red, out of turns
    (built once for the session: the tests only read them)."""
    root = built_once(tmp_path_factory, "report-shards", _three_shards)
    return [root / f"shard-{name}" for name in "abc"]


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_report_over_three_shards_gives_totals(shards: list[Path], tmp_path: Path) -> None:
    md_file, json_file = tmp_path / "report.md", tmp_path / "report.json"
    proc = run_cli(["report", *map(str, shards), "--out-md", str(md_file), "--out-json", str(json_file)],
                   cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = [read(d / "result.json") for d in shards]
    data = read(json_file)

    assert [r["run_id"] for r in data["runs"]] == [r["run_id"] for r in results]
    assert [r["stop_reason"] for r in data["runs"]] == ["completed", "gates_failed", "max_turns"]
    assert [r["exit_code"] for r in data["runs"]] == [0, 1, 3]
    expected_gates = [(sum(g["passed"] for g in r["gates"]), sum(not g["passed"] for g in r["gates"])) for r in results]
    assert [(r["gates_passed"], r["gates_failed"]) for r in data["runs"]] == expected_gates
    assert expected_gates[:2] == [(1, 0), (0, 1)]
    assert [r["failed_gates"] for r in data["runs"]][1] == ["pytest"]
    assert data["runs"][0]["changed_files"] == 1 and data["runs"][2]["changed_files"] == 0

    totals = data["totals"]
    assert (totals["runs"], totals["succeeded"], totals["failed"]) == (3, 1, 2)
    assert totals["total_tokens"] == sum(r["usage"]["total_tokens"] for r in results) > 0
    assert totals["turns"] == sum(r["usage"]["turns"] for r in results)
    assert totals["wall_s"] == pytest.approx(sum(r["wall_s"] for r in results), abs=0.01)
    assert totals["cost_usd"] == 0.0 and totals["cost_unknown_runs"] == 0  # the replay model costs nothing
    assert totals["changed_files"] == ["calc.py"]
    assert totals["stop_reasons"] == {"completed": 1, "gates_failed": 1, "max_turns": 1}

    markdown = md_file.read_text()
    assert proc.stdout.strip() == markdown.strip()
    assert "3 runs, 1 succeeded, 2 failed" in markdown
    for r in results:
        assert r["run_id"] in markdown
    assert f"| tokens | {totals['total_tokens']:,} |" in markdown
    assert "- `calc.py`" in markdown

    as_json = run_cli(["report", *map(str, shards), "--json"], cwd=tmp_path)
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == data


def test_cost_totals_are_none_aware(shards: list[Path], tmp_path: Path) -> None:
    dirs = []
    for i, (src, cost) in enumerate(zip(shards, [None, 0.25, None], strict=True)):
        result = read(src / "result.json")
        result["usage"]["cost_usd"] = cost
        dirs.append(tmp_path / f"r{i}")
        dirs[-1].mkdir()
        (dirs[-1] / "result.json").write_text(json.dumps(result))
    markdown, data = aggregate(dirs)
    assert data["totals"]["cost_usd"] == 0.25 and data["totals"]["cost_unknown_runs"] == 2
    assert "$0.25 (+ 2 runs of unknown cost)" in markdown

    for d in dirs:
        result = read(d / "result.json")
        result["usage"]["cost_usd"] = None
        (d / "result.json").write_text(json.dumps(result))
    markdown, data = aggregate(dirs)
    assert data["totals"]["cost_usd"] is None and data["totals"]["cost_unknown_runs"] == 3
    assert "| cost | unknown |" in markdown


def test_markdown_escapes_table_breaking_names(shards: list[Path], tmp_path: Path) -> None:
    result = read(shards[0] / "result.json")
    hostile = copy.deepcopy(result)
    hostile["changed_files"] = ["a|b.py"]
    hostile["run_id"] = "x|y"
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "result.json").write_text(json.dumps(hostile))
    markdown, _ = aggregate([tmp_path / "r"])
    row = next(line for line in markdown.splitlines() if "x\\|y" in line)
    assert row.count(" | ") == 8  # nine columns, none added by the run id
    assert "- `a\\|b.py`" in markdown


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("missing", "no result.json"),
        ("not-json", "not valid JSON"),
        ("wrong-shape", "not a prime-ci result"),
        ("no-dir", "not a directory"),
    ],
)
def test_bad_out_dir_exits_2_with_one_line(shards: list[Path], tmp_path: Path, setup: str, needle: str) -> None:
    bad = tmp_path / "bad"
    if setup != "no-dir":
        bad.mkdir()
    if setup == "not-json":
        (bad / "result.json").write_text('{"run_id": ')
    elif setup == "wrong-shape":
        result = read(shards[0] / "result.json")
        del result["usage"]
        (bad / "result.json").write_text(json.dumps(result))
    proc = run_cli(["report", str(shards[0]), str(bad)], cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(bad) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    with pytest.raises(ConfigError, match=needle):
        aggregate([bad])


def test_report_needs_a_dir(tmp_path: Path) -> None:
    proc = run_cli(["report"], cwd=tmp_path)
    assert proc.returncode == 2 and "OUT_DIRS" in proc.stderr


def test_out_files_land_where_asked(shards: list[Path], tmp_path: Path) -> None:
    nested = tmp_path / "deep" / "er"
    proc = run_cli(["report", str(shards[0]), "--out-json", str(nested / "r.json")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert read(nested / "r.json")["totals"]["runs"] == 1
    shutil.rmtree(nested)
