"""Issue 24 item 3: ``prime-ci export --prime-agent DEST`` never writes outside DEST; ids from the session
files that are not plain names are refused (exit 2, one line) before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_inproc
from prime_ci.children.export import export_prime_agent
from prime_ci.errors import ConfigError


def _write(path: Path, *records: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _header(session_id: str) -> dict[str, Any]:
    return {"type": "session", "version": 3, "id": session_id, "timestamp": "2026-01-01T00:00:00Z", "cwd": "/"}


def _spawned(rlm_child_id: str, session_dir: str, parent: str = "root") -> dict[str, Any]:
    return {"type": "custom", "id": f"e-{len(rlm_child_id)}", "parentId": None, "timestamp": "2026-01-01T00:00:01Z",
            "customType": "prime_ci.child",
            "data": {"event": "spawned", "rlm_child_id": rlm_child_id, "name": "kid", "session_dir": session_dir,
                     "parent": parent}}


def crafted_run(out: Path, *, root_id: str = "root-session", rlm_child_id: str = "sub-0123abcd",
                session_dir: str = "/elsewhere/out/children/kid", child_id: str = "kid-session") -> Path:
    _write(out / "session.jsonl", _header(root_id), _spawned(rlm_child_id, session_dir))
    _write(out / "children" / "kid" / "session.jsonl", _header(child_id))
    return out


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_plain_ids_are_laid_out_under_dest(tmp_path: Path) -> None:
    out = crafted_run(tmp_path / "out")
    dest = tmp_path / "dest"
    written = export_prime_agent(out, dest)
    assert written == [dest / "sessions" / "root-session.jsonl",
                       dest / "session-artifacts" / "root-session" / "sub-0123abcd" / "kid-session.jsonl"]


@pytest.mark.parametrize("field, value", [
    ("root_id", "../../x"),
    ("root_id", "ABSOLUTE"),  # replaced below by an absolute path inside tmp_path
    ("root_id", "x/../../../y"),
    ("rlm_child_id", "../../../../y"),
    ("rlm_child_id", "ABSOLUTE"),
    ("child_id", "../../../../z"),
    ("child_id", "ABSOLUTE"),
    ("root_id", "ok\n"),
])
def test_an_id_that_is_not_a_plain_name_is_refused_and_nothing_is_written(
    tmp_path: Path, field: str, value: str
) -> None:
    base = tmp_path / "a" / "b" / "c"
    out = base / "out"
    if value == "ABSOLUTE":
        value = str(tmp_path / "planted")
    crafted_run(out, **{field: value})
    before = files_under(tmp_path)
    dest = base / "dest"
    with pytest.raises(ConfigError, match="not a plain name"):
        export_prime_agent(out, dest)
    assert files_under(tmp_path) == before  # nothing at all: neither outside DEST nor a partial export inside


def test_a_session_dir_that_climbs_is_refused(tmp_path: Path) -> None:
    out = crafted_run(tmp_path / "out", session_dir="/x/..")
    with pytest.raises(ConfigError, match="child session directory"):
        export_prime_agent(out, tmp_path / "dest")


def test_cli_exits_2_with_one_line(tmp_path: Path) -> None:
    out = crafted_run(tmp_path / "a" / "b" / "out", rlm_child_id="../../../../y")
    done = cli_inproc(["export", str(out), "--prime-agent", str(tmp_path / "a" / "b" / "dest")], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "rlm_child_id" in done.stderr and "'../../../../y'" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "y").exists() and not (tmp_path / "a" / "b" / "dest").exists()


@pytest.mark.parametrize("second_rlm, second_child, second_parent, says", [
    ("b.jsonl", "c", "sub-0123abcd", "both a session file and a sub-agent's directory"),  # found by the nightly fuzz
    ("sub-0123abcd", "kid-session", "root", "two sessions would both be"),
])
def test_ids_that_give_two_sessions_one_path_are_refused(tmp_path: Path, second_rlm: str, second_child: str,
                                                         second_parent: str, says: str) -> None:
    """A child ``sub-0123abcd`` whose session id is ``b``, and a grandchild ``b.jsonl`` under it: the child's file
    ``sub-0123abcd/b.jsonl`` is the grandchild's directory (before: FileExistsError, a traceback)."""
    out = crafted_run(tmp_path / "out", child_id="b" if second_rlm == "b.jsonl" else "kid-session")
    _write(out / "session.jsonl", _header("root-session"), _spawned("sub-0123abcd", "/x/children/kid"),
           _spawned(second_rlm, "/x/children/grandkid", parent=second_parent))
    _write(out / "children" / "grandkid" / "session.jsonl", _header(second_child))
    before = files_under(tmp_path)
    with pytest.raises(ConfigError, match=says):
        export_prime_agent(out, tmp_path / "dest")
    assert files_under(tmp_path) == before


def test_a_child_logged_twice_is_copied_once(tmp_path: Path) -> None:
    out = crafted_run(tmp_path / "out")
    with (out / "session.jsonl").open("a") as log:
        log.write(json.dumps(_spawned("sub-0123abcd", "/elsewhere/out/children/kid")) + "\n")
    dest = tmp_path / "dest"
    assert export_prime_agent(out, dest) == [dest / "sessions" / "root-session.jsonl",
                                             dest / "session-artifacts" / "root-session" / "sub-0123abcd" /
                                             "kid-session.jsonl"]
