"""``prime-ci resume`` on a session whose ``prime_ci.run`` record, stop record or result.json is not prime-ci's (a
crafted or damaged artifacts directory): exit 2 with one line naming what is wrong, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prime_ci.engine.resume import plan
from prime_ci.errors import ConfigError

WORKTREE = {"path": "/nonexistent/work", "git_dir": "/nonexistent/git", "root": "/nonexistent", "source": "/x"}
RUN = {"run_id": "r1", "base_commit": "abc", "config": {"task": "t", "model": "openai/x"}, "worktree": WORKTREE}
STOP = {"stop_reason": "completed", "exit_code": 0}


def crafted(out: Path, run: Any, stop: Any = None, result: str | None = None) -> Path:
    out.mkdir()
    records: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "s", "cwd": "/",
                                      "timestamp": "2026-01-01T00:00:00Z"}]
    for n, (kind, data) in enumerate((("prime_ci.run", run), ("prime_ci.stop", stop))):
        if data is not None:
            records.append({"type": "custom", "id": f"0000000{n}", "parentId": None, "customType": kind,
                            "timestamp": "2026-01-01T00:00:01Z", "data": data})
    (out / "session.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if result is not None:
        (out / "result.json").write_text(result)
    return out


@pytest.mark.parametrize("run, stop, result, says", [
    ({**RUN, "run_id": None}, STOP, None, "run_id"),
    ({k: v for k, v in RUN.items() if k != "worktree"}, STOP, None, "worktree"),
    ({**RUN, "worktree": "/tmp"}, None, None, "worktree"),
    ({**RUN, "config": [1, 2]}, None, None, "config"),
    ({**RUN, "config": {"task": "t", "max_turns": "lots"}}, None, None, "max_turns"),
    ({**RUN, "gates": [{"name": "../x", "command": "true"}]}, None, None, "gates.0.name"),
    (RUN, {"stop_reason": "completed"}, None, "stop record"),
    (RUN, STOP, "{not json", "result.json"),
    (RUN, STOP, "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (RUN, STOP, json.dumps({"exit_code": 0, "stop_reason": "completed", "usage": []}), "result.json"),
])
def test_a_record_that_is_not_prime_cis_is_a_config_error(tmp_path: Path, run: Any, stop: Any, result: str | None,
                                                            says: str) -> None:
    with pytest.raises(ConfigError, match="is not prime-ci's") as caught:
        plan(crafted(tmp_path / "out", run, stop, result), salvage=False)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_finished_run_without_result_json_returns_its_stop_record(tmp_path: Path) -> None:
    done = plan(crafted(tmp_path / "out", RUN, STOP), salvage=False)
    assert done.finished == STOP and done.run_id == "r1"


@pytest.mark.parametrize("name", ["session.jsonl", "result.json"])
def test_a_file_that_leads_out_of_out_is_refused(tmp_path: Path, name: str) -> None:
    """Issue 37: resume reads (and appends to) only what is in OUT: a symlink out of it is one line, exit 2."""
    out = crafted(tmp_path / "out", RUN, STOP, result="{}")
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    (out / name).rename(outside)
    (out / name).symlink_to(outside)
    before = outside.read_bytes()
    with pytest.raises(ConfigError, match=rf"^resume: {out / name} leads out of {out} \(to {outside}\): refused$"):
        plan(out, salvage=False)
    assert outside.read_bytes() == before
