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

from prime_ci.children.family import NAME
from prime_ci.errors import ConfigError
from prime_ci.session.log import read_session


def export_prime_agent(out: Path, dest: Path) -> list[Path]:
    """Copy the sessions of the run in ``out`` under ``dest``; returns the files written, the root's first.

    Every id that becomes a file or directory name is checked before anything is written: ids are data from
    the session files, and one that is not a plain name (``../x``, an absolute path) is refused.
    """
    root_path = out / "session.jsonl"
    if not root_path.is_file():
        raise ConfigError(f"export: {root_path} not found")
    root = read_session(root_path)
    if not root.header.get("id"):
        raise ConfigError(f"export: {root_path} has no session header")
    root_id = _plain(root.header["id"], "session id", root_path)
    copies = [(root_path, dest / "sessions" / f"{root_id}.jsonl")]
    dirs = {"root": dest / "session-artifacts" / root_id}
    for entry in root.entries:  # spawn order: a parent is always spawned before its children
        data = entry.get("data") if entry.get("customType") == "prime_ci.child" else None
        if not isinstance(data, dict) or data.get("event") != "spawned":
            continue
        parent_dir = dirs.get(str(data.get("parent")))
        rlm_id = _plain(data.get("rlm_child_id"), "rlm_child_id", root_path)
        name = _plain(Path(str(data.get("session_dir", ""))).name, "child session directory", root_path)
        source = out / "children" / name / "session.jsonl"
        if parent_dir is None or not source.is_file():
            continue  # a child that never started writes no session
        child_id = _plain(read_session(source).header.get("id") or rlm_id, "session id", source)
        dirs[rlm_id] = parent_dir / rlm_id
        copies.append((source, dirs[rlm_id] / f"{child_id}.jsonl"))
    copies = list(dict.fromkeys(copies))  # a child logged twice is copied once
    _check_layout([target for _, target in copies], root_path)
    return [_copy(source, target) for source, target in copies]


def _plain(value: object, what: str, where: Path) -> str:
    """``value`` if it is a plain name: one path component, nothing a path could climb with."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ConfigError(f"export: {where}: {what} {ascii(value)[:80]} is not a plain name "
                          "(letters, digits, . _ -); nothing was exported")
    return value


def _check_layout(targets: list[Path], where: Path) -> None:
    """Refuse ids that give two sessions one file, or make a session file the path of a sub-agent's directory (a
    child ``a`` whose session id is ``b`` and a grandchild ``b.jsonl`` under it)."""
    files: set[Path] = set()
    for target in targets:
        if target in files:
            raise ConfigError(f"export: {where}: two sessions would both be {target}; nothing was exported")
        files.add(target)
    for target in targets:
        if clash := next((parent for parent in target.parents if parent in files), None):
            raise ConfigError(f"export: {where}: {clash} would be both a session file and a sub-agent's directory; "
                              "nothing was exported")


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target
