"""``prime-ci export OUT_DIR --prime-agent DEST``: a run's sessions laid out the way Prime Agent keeps them.

prime-ci writes the root session to ``OUT_DIR/session.jsonl`` and every sub-agent's, whatever its depth, to
``OUT_DIR/children/<name>/session.jsonl``. Prime Agent finds a session at ``sessions/<session id>.jsonl`` and its
sub-agents in its artifacts directory, ``session-artifacts/<session id>/sub-<8 hex>/``, one ``*.jsonl`` there
and each grandchild's directory nested inside its parent's. Its sub-agent list comes from each parent's
registry, ``rlm-subagents.jsonl`` in the parent's artifact directory (``session-artifacts/<parent id>/`` beside
the directory holding the parent's file), one ``rlm_subagent`` record per child naming its session file.

The root is copied byte for byte (the child ids are already ``sub-<8 hex>``). A child is copied byte for byte
but for two lines: its header, to point ``parentSession`` at its parent's exported file, and its task (its first
user message), without the ``[task from parent]`` prefix prime-ci's child was given it with. Prime Agent labels a
sub-agent read from disk by that message (its ``/context`` tree; ``firstMessage`` in its sub-agent list), and a
live one by the task as the parent gave it: without the prefix, the two read alike. Each rewritten line's
``crc32`` is recomputed when it has one. The parent-child links come from the root's ``prime_ci.child`` records;
every path written is absolute, as Prime Agent writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from prime_ci.children.family import NAME
from prime_ci.errors import ConfigError
from prime_ci.isolation import durable
from prime_ci.isolation.confined import read_in
from prime_ci.session.crc import record_text, signed_line
from prime_ci.session.log import SessionFile, read_session
from prime_ci.session.read import parts_text
from prime_ci.session.wellformed import malformed

REGISTRY = "rlm-subagents.jsonl"
TASK_PREFIX = "[task from parent]\n\n"


@dataclass
class _Exported:
    session_id: str
    file: Path  # where it is written under DEST
    dir: Path  # the directory its own sub-agents' directories go in


def export_prime_agent(out: Path, dest: Path) -> list[Path]:
    """Copy the sessions of the run in ``out`` under ``dest``; returns the files written, the root's first.

    Every id that becomes a file or directory name is checked before anything is written: ids are data from
    the session files, and one that is not a plain name (``../x``, an absolute path) is refused.
    """
    dest = dest.resolve()
    root_path = out / "session.jsonl"
    root_bytes = _read(out, root_path)
    if root_bytes is None:
        raise ConfigError(f"export: {root_path} not found")
    root = read_session(root_path, data=root_bytes)
    if not root.header.get("id"):
        raise ConfigError(f"export: {root_path} has no session header")
    root_id = _plain(root.header["id"], "session id", root_path)
    artifacts = dest / "session-artifacts" / root_id
    exported = {"root": _Exported(root_id, dest / "sessions" / f"{root_id}.jsonl", artifacts)}
    writes: list[tuple[Path, bytes]] = [(exported["root"].file, root_bytes)]
    registries: dict[Path, list[dict[str, Any]]] = {}
    sources: dict[str, Path] = {}
    for entry in root.entries:  # spawn order: a parent is always spawned before its children
        data = entry.get("data") if entry.get("customType") == "prime_ci.child" else None
        if not isinstance(data, dict) or data.get("event") != "spawned":
            continue
        parent = exported.get(str(data.get("parent")))
        rlm_id = _plain(data.get("rlm_child_id"), "rlm_child_id", root_path)
        name = _plain(Path(str(data.get("session_dir", ""))).name, "child session directory", root_path)
        source = out / "children" / name / "session.jsonl"
        if parent is None or sources.get(rlm_id) == source or (raw := _read(out, source)) is None:
            continue  # a child that never started writes no session; one logged twice is exported once
        if rlm_id in sources:  # two children with one id: Prime Agent keeps one session per sub-agent directory
            raise ConfigError(f"export: {root_path}: two sessions would both be sub-agent {rlm_id}; "
                              "nothing was exported")
        sources[rlm_id] = source
        child = read_session(source, data=raw)
        child_id = _plain(child.header.get("id") or rlm_id, "session id", source)
        mine = exported[rlm_id] = _Exported(child_id, parent.dir / rlm_id / f"{child_id}.jsonl", parent.dir / rlm_id)
        writes.append((mine.file, _as_prime_agent_child(raw, str(parent.file), source, child)))
        registry = parent.file.parent.parent / "session-artifacts" / parent.session_id / REGISTRY
        registries.setdefault(registry, []).append(_record(data, entry, child, mine, parent))
    _check_layout([path for path, _ in writes] + list(registries), root_path)
    for path, data in writes:
        durable.write(path, data, redacted=True)
    for path, records in registries.items():
        durable.write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), redacted=True)
    return [path for path, _ in writes]


def _read(out: Path, path: Path) -> bytes | None:
    """The bytes of a session file in OUT, None when there is none; a symlink out of OUT is refused (exit 2)."""
    try:
        return read_in(out, path, "export")
    except FileNotFoundError:
        return None


def _as_prime_agent_child(data: bytes, parent_file: str, source: Path, child: SessionFile) -> bytes:
    """The child's session file with its header's ``parentSession`` set to ``parent_file`` and its task without
    prime-ci's prefix; every other line byte for byte."""
    lines = data.split(b"\n")
    header = _record_of(lines[0])
    if header is None or header.get("type") != "session":
        raise ConfigError(f"export: {source} is corrupt: its first line is not a session header; nothing was exported")
    header["parentSession"] = parent_file
    lines[0] = _line(header)
    task = _task_entry(child)
    at = child.lines[task] - 1 if task is not None else 0
    if 0 < at < len(lines) and (entry := _record_of(lines[at])) is not None and _unprefixed(entry):
        lines[at] = _line(entry)
    return b"\n".join(lines)


def _unprefixed(entry: dict[str, Any]) -> bool:
    """Take prime-ci's prefix off the first text part of a task message; whether it was there."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    first = next((p for p in content if isinstance(p, dict) and p.get("type") == "text"), None) \
        if isinstance(content, list) else None
    if first is None or not isinstance(first.get("text"), str) or not first["text"].startswith(TASK_PREFIX):
        return False
    first["text"] = first["text"].removeprefix(TASK_PREFIX)
    return True


def _record_of(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _line(record: dict[str, Any]) -> bytes:
    """``record`` written again (without its newline), signed when it was."""
    signed = record.pop("crc32", None) is not None
    text = record_text(record)
    return signed_line(text)[:-1] if signed else text.encode("utf-8", "backslashreplace")


def _record(spawned: dict[str, Any], entry: dict[str, Any], child: SessionFile, mine: _Exported,
            parent: _Exported) -> dict[str, Any]:
    """One registry line as Prime Agent's reader takes it (an ``rlm_subagent`` record; the last one per
    ``childId`` wins)."""
    provider, _, model = str(spawned.get("model") or "").partition("/")
    ended = child.entries[-1].get("timestamp") if child.entries else None
    return {
        "type": "rlm_subagent", "childId": mine.dir.name, "sessionName": str(spawned.get("name")),
        "sessionDir": str(mine.dir), "sessionFile": str(mine.file), "parentSessionId": parent.session_id,
        "parentSessionFile": str(parent.file), "rlmDepth": _depth(spawned.get("depth")),
        "prompt": _task(child), "model": {"provider": provider, "modelId": model or provider},
        "status": "completed", "createdAt": _millis(entry.get("timestamp")),
        "updatedAt": str(ended or entry.get("timestamp") or ""),
    }


def _task(child: SessionFile) -> str:
    """The task the parent gave: the child's first user message, without the prefix prime-ci adds."""
    found = _task_entry(child, legacy=True)
    if found is None:
        return ""
    e = child.entries[found]
    parts = e["message"].get("content") if e.get("type") == "message" else e.get("content")
    return parts_text(parts or "").removeprefix(TASK_PREFIX)


def _task_entry(child: SessionFile, *, legacy: bool = False) -> int | None:
    """The index of the child's task: its first user message (with ``legacy``, or a first ``custom_message``, as
    logs had it before the task was a user message). A malformed message before it is refused, naming its line
    (exit 2)."""
    for i, e in enumerate(child.entries):
        if e.get("type") in ("message", "custom_message") and (problem := malformed(e)) is not None:
            line = child.lines[i] if i < len(child.lines) else "?"
            raise ConfigError(f"export: {child.path} is corrupt: line {line}: {problem}; nothing was exported")
        if e.get("type") == "message" and e["message"].get("role") == "user":
            return i
        if e.get("type") == "custom_message":
            return i if legacy else None
    return None


def _depth(value: Any) -> int:
    return value if type(value) is int and value > 0 else 1


def _millis(stamp: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


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

