"""One summary over several runs (``prime-ci report OUT_DIR...``), e.g. the shards of a nightly matrix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from prime_ci.artifacts.schemas import ResultModel
from prime_ci.artifacts.summary_parts import code_cell
from prime_ci.durations import format_duration
from prime_ci.errors import ConfigError
from prime_ci.isolation import durable
from prime_ci.isolation.confined import read_in
from prime_ci.isolation.parse import json_loads
from prime_ci.isolation.untrusted import visible
from prime_ci.money import usd_or_unknown

REPORT_VERSION = 1
MAX_FILES_SHOWN = 100


def load_result(out_dir: Path) -> dict[str, Any]:
    """result.json of one run, checked against the published schema; ConfigError names what is wrong."""
    path = out_dir / "result.json"
    if not out_dir.is_dir():
        raise ConfigError(f"report: not a directory: {out_dir}")
    try:  # never a file outside the run's directory through a symlink
        raw = read_in(out_dir, path, "report").decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"report: no result.json in {out_dir}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"report: cannot read {path}: {exc}") from None
    try:
        data = json_loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"report: {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    try:
        ResultModel.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"report: {path} is not a prime-ci result: {where}: {first['msg']}") from None
    assert isinstance(data, dict)
    return data


def _row(out_dir: Path, result: dict[str, Any]) -> dict[str, Any]:
    usage = result["usage"]
    gates = result["gates"]
    return {
        "dir": str(out_dir),
        "run_id": result["run_id"],
        "stop_reason": result["stop_reason"],
        "exit_code": result["exit_code"],
        "success": bool(result["success"]),
        "turns": usage["turns"],
        "total_tokens": usage["total_tokens"],
        "cost_usd": usage["cost_usd"],
        "wall_s": result["wall_s"],
        "gates_passed": sum(1 for g in gates if g["passed"]),
        "gates_failed": sum(1 for g in gates if not g["passed"]),
        "failed_gates": [g["name"] for g in gates if not g["passed"]],
        "changed_files": len(result["changed_files"]),
        "files": list(result["changed_files"]),
        "task": " ".join(str(result.get("task", "")).split()),
    }


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    known_costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    files = sorted({f for r in rows for f in r["files"]})
    by_reason: dict[str, int] = {}
    for r in rows:
        by_reason[r["stop_reason"]] = by_reason.get(r["stop_reason"], 0) + 1
    return {
        "runs": len(rows),
        "succeeded": sum(1 for r in rows if r["success"]),
        "failed": sum(1 for r in rows if not r["success"]),
        "turns": sum(r["turns"] for r in rows),
        "total_tokens": sum(r["total_tokens"] for r in rows),
        # None only when no run knows its cost; cost_unknown_runs says how partial the sum is.
        "cost_usd": round(sum(known_costs), 6) if known_costs else None,
        "cost_unknown_runs": len(rows) - len(known_costs),
        "wall_s": round(sum(r["wall_s"] for r in rows), 3),
        "gates_passed": sum(r["gates_passed"] for r in rows),
        "gates_failed": sum(r["gates_failed"] for r in rows),
        "stop_reasons": dict(sorted(by_reason.items())),
        "changed_files": files,
    }


def _markdown(rows: list[dict[str, Any]], totals: dict[str, Any]) -> str:
    icon = "✅" if totals["failed"] == 0 else "❌"
    lines = [
        f"## {icon} prime-ci report: {totals['runs']} runs, {totals['succeeded']} succeeded, "
        f"{totals['failed']} failed",
        "",
        "| run | stop reason | exit | turns | tokens | cost | wall | gates | files |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        state = "✅" if r["success"] else "❌"
        gates = f"{r['gates_passed']} ✓ / {r['gates_failed']} ✗"
        if r["failed_gates"]:
            gates += " (" + ", ".join(code_cell(n) for n in r["failed_gates"][:5]) + ")"
        lines.append(
            f"| {state} {code_cell(r['run_id'])} | {code_cell(r['stop_reason'])} | {r['exit_code']} | {r['turns']} | "
            f"{r['total_tokens']:,} | {usd_or_unknown(r['cost_usd'])} | {format_duration(r['wall_s'])} | {gates} | "
            f"{r['changed_files']} |"
        )
    cost = usd_or_unknown(totals["cost_usd"])
    if totals["cost_unknown_runs"] and totals["cost_usd"] is not None:
        cost += f" (+ {totals['cost_unknown_runs']} runs of unknown cost)"
    reasons = ", ".join(f"`{k}` × {v}" for k, v in totals["stop_reasons"].items())
    lines += [
        "",
        "### Totals",
        "",
        "| | |",
        "|---|---|",
        f"| runs | {totals['runs']} ({totals['succeeded']} succeeded, {totals['failed']} failed) |",
        f"| stop reasons | {reasons} |",
        f"| turns | {totals['turns']} |",
        f"| tokens | {totals['total_tokens']:,} |",
        f"| cost | {cost} |",
        f"| wall clock (sum) | {format_duration(totals['wall_s'])} |",
        f"| gates | {totals['gates_passed']} passed, {totals['gates_failed']} failed |",
        "",
        f"### Changed files ({len(totals['changed_files'])})",
        "",
    ]
    files = totals["changed_files"]
    lines += [f"- {code_cell(f, 300)}" for f in files[:MAX_FILES_SHOWN]] or ["(none)"]
    if len(files) > MAX_FILES_SHOWN:
        lines.append(f"- … and {len(files) - MAX_FILES_SHOWN} more (see the JSON report)")
    return visible("\n".join(lines) + "\n")


def aggregate(out_dirs: list[Path]) -> tuple[str, dict[str, Any]]:
    """Markdown and a JSON-able dict over the runs whose artifacts are in ``out_dirs`` (order kept)."""
    if not out_dirs:
        raise ConfigError("report: give at least one OUT_DIR")
    rows = [_row(d, load_result(d)) for d in out_dirs]
    totals = _totals(rows)
    data = {"version": REPORT_VERSION, "runs": rows, "totals": totals}
    return _markdown(rows, totals), data


def write_report(markdown: str, data: dict[str, Any], *, out_md: Path | None, out_json: Path | None) -> None:
    """The report's files (``--out-md``, ``--out-json``), written through ``durable`` (redacted, atomic)."""
    if out_md is not None:
        durable.write(out_md, markdown)
    if out_json is not None:
        durable.write_json(out_json, data)
