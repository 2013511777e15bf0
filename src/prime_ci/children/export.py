"""``prime-ci export OUT_DIR --prime-agent DEST``: a run's sessions laid out the way Prime Agent keeps them.

prime-ci writes the root session to ``OUT_DIR/session.jsonl`` and every sub-agent's, whatever its depth, to
``OUT_DIR/children/<name>/session.jsonl``. Prime Agent finds a session at ``sessions/<session id>.jsonl`` and its
sub-agents in its artifacts directory, ``session-artifacts/<session id>/sub-<8 hex>/``, one ``*.jsonl`` there
and each grandchild's directory nested inside its parent's. The files are copied byte for byte (the child ids
are already ``sub-<8 hex>``); the parent-child links come from the root's ``prime_ci.child`` records.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from prime_ci.errors import ConfigError
from prime_ci.session.log import read_session


def export_prime_agent(out: Path, dest: Path) -> list[Path]:
    """Copy the sessions of the run in ``out`` under ``dest``; returns the files written, the root's first."""
    root_path = out / "session.jsonl"
    if not root_path.is_file():
        raise ConfigError(f"export: {root_path} not found")
    root = read_session(root_path)
    root_id = str(root.header.get("id") or "")
    if not root_id:
        raise ConfigError(f"export: {root_path} has no session header")
    written = [_copy(root_path, dest / "sessions" / f"{root_id}.jsonl")]
    dirs = {"root": dest / "session-artifacts" / root_id}
    for entry in root.entries:  # spawn order: a parent is always spawned before its children
        data = entry.get("data") if entry.get("customType") == "prime_ci.child" else None
        if not isinstance(data, dict) or data.get("event") != "spawned":
            continue
        parent_dir = dirs.get(str(data.get("parent")))
        source = out / "children" / Path(str(data.get("session_dir", ""))).name / "session.jsonl"
        if parent_dir is None or not source.is_file():
            continue  # a child that never started writes no session
        child_id = str(read_session(source).header.get("id") or data["rlm_child_id"])
        dirs[str(data["rlm_child_id"])] = parent_dir / str(data["rlm_child_id"])
        written.append(_copy(source, dirs[str(data["rlm_child_id"])] / f"{child_id}.jsonl"))
    return written


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target
