"""Harness data types: entries, operations, change sets, and their names and limits."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prime_ci.errors import ConfigError
from prime_ci.harness.frontmatter import render_frontmatter

KINDS = ("prompt", "memory", "skill", "subagent")
TRIGGERS = ("agent", "refine", "rollback", "trust", "cli")
TRUST_LEVELS = ("trusted", "untrusted")
OPS = ("create", "update", "delete")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")
RESERVED_PROMPTS = frozenset({"base", "system"})  # the packaged base prompt is never a harness entry
_DIRS = {"prompt": "prompts", "memory": "memories", "skill": "skills", "subagent": "subagents"}
_KEYS = {
    "prompt": ("description", "source_run", "trust"),
    "memory": ("description", "source_run", "trust"),
    "skill": ("name", "description", "source_run", "trust"),
    "subagent": ("description", "model", "source_run", "trust"),
}


class HarnessError(ConfigError):
    """A harness operation was refused (bad name, missing entry, conflicting rollback, ...)."""


class HarnessCorrupt(HarnessError):
    """A harness file cannot be parsed; names the file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"corrupt harness file {path}: {reason}")
        self.path = path
        self.reason = reason


# ---- entries and change sets -------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    description: str
    body: str
    path: Path
    source_run: str = ""
    trust: str = "trusted"
    model: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # other SKILL.md keys (license, ...), kept as written

    @property
    def trusted(self) -> bool:
        return self.trust == "trusted"

    def to_json(self) -> dict[str, Any]:
        """The entry for the kernel API (``harness.list``/``read``)."""
        return {"kind": self.kind, "name": self.name, "description": self.description, "trust": self.trust,
                "source_run": self.source_run, "model": self.model, "path": str(self.path), "content": self.body}

    def render(self) -> str:
        values = {"name": self.name, "description": self.description, "model": self.model or "",
                  "source_run": self.source_run, "trust": self.trust}
        meta = [(k, values[k]) for k in _KEYS[self.kind] if k != "model" or self.model]
        return render_frontmatter([*meta, *sorted(self.extra)], self.body)


@dataclass(frozen=True)
class Op:
    """One applied operation: full file text before and after (None = absent)."""

    op: str
    kind: str
    name: str
    before: str | None
    after: str | None
    evidence: str = ""

    @property
    def target(self) -> str:
        return f"{self.kind}:{self.name}"

    def diff(self, rel: str | None = None) -> str:
        label = rel or self.target
        return "".join(difflib.unified_diff(
            (self.before or "").splitlines(keepends=True), (self.after or "").splitlines(keepends=True),
            fromfile=f"a/{label}" if self.before is not None else "/dev/null",
            tofile=f"b/{label}" if self.after is not None else "/dev/null",
        ))


@dataclass(frozen=True)
class ChangeSet:
    id: str
    ts: str
    source_run: str
    trigger: str
    rationale: str
    ops: tuple[Op, ...]
    rollback_of: str | None = None

    @property
    def targets(self) -> set[tuple[str, str]]:
        return {(op.kind, op.name) for op in self.ops}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id, "ts": self.ts, "source_run": self.source_run, "trigger": self.trigger,
            "rationale": self.rationale,
            "ops": [{"op": o.op, "kind": o.kind, "name": o.name, "before": o.before, "after": o.after,
                     "evidence": o.evidence} for o in self.ops],
        }
        if self.rollback_of is not None:
            data["rollback_of"] = self.rollback_of
        return data

    @classmethod
    def from_json(cls, data: Any) -> ChangeSet:
        if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
            raise ValueError("not a change set object")
        ops = tuple(
            Op(str(o["op"]), str(o["kind"]), str(o["name"]), o["before"], o["after"], str(o.get("evidence", "")))
            for o in data["ops"]
        )
        return cls(str(data["id"]), str(data["ts"]), str(data.get("source_run", "")), str(data["trigger"]),
                   str(data.get("rationale", "")), ops, data.get("rollback_of"))


@dataclass(frozen=True)
class Change:
    """A requested operation (from the kernel API, a refinement plan or the CLI)."""

    op: str
    kind: str
    name: str
    content: str = ""
    evidence: str = ""
    description: str | None = None
    model: str | None = None


def check_name(kind: str, name: str) -> None:
    if kind not in KINDS:
        raise HarnessError(f"unknown harness kind {kind!r}; kinds are {', '.join(KINDS)}")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise HarnessError(f"invalid {kind} name {name!r}: use 1-64 of [a-z0-9._-], starting with [a-z0-9]")
    if kind == "prompt" and name in RESERVED_PROMPTS:
        raise HarnessError(f"prompt name {name!r} is reserved: the base prompt is never a harness entry")


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, object) per line; a line that is not JSON raises HarnessCorrupt naming the file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return
    for n, line in enumerate(lines, start=1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except ValueError as exc:
                raise HarnessCorrupt(path, f"line {n}: {exc}") from None


# ---- the store ---------------------------------------------------------------------------------------
