"""Continual harness store: entries as markdown with frontmatter, change sets in ``history.jsonl``.

Layout (DESIGN §7): ``prompts/<name>.md``, ``memories/<name>.md``, ``skills/<name>/SKILL.md``,
``subagents/<name>.md``, ``history.jsonl`` (applied change sets, full before/after text per op) and
``rejected.jsonl`` (refinement plans that were refused). Entry files hold no timestamps, and the same
content always renders to the same bytes, so the diffs on a harness branch show only real changes.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from prime_ci.errors import PersistenceError
from prime_ci.harness.entries import (
    _DIRS,
    _KEYS,
    KINDS,
    MODEL_RE,
    NAME_RE,
    OPS,
    TRIGGERS,
    TRUST_LEVELS,
    Change,
    ChangeSet,
    Entry,
    HarnessCorrupt,
    HarnessError,
    Op,
    check_name,
    read_jsonl,
)
from prime_ci.harness.frontmatter import one_line, parse_frontmatter
from prime_ci.isolation import durable
from prime_ci.session.log import now_iso

__all__ = ["KINDS", "NAME_RE", "TRIGGERS", "Change", "ChangeSet", "Entry", "HarnessCorrupt", "HarnessError",
           "HarnessStore", "Op", "check_name", "read_jsonl"]


class HarnessStore:
    """CRUD over one harness directory; every change is one change set in ``history.jsonl``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.history_path = root / "history.jsonl"
        self.rejected_path = root / "rejected.jsonl"

    def path(self, kind: str, name: str) -> Path:
        check_name(kind, name)
        if kind == "skill":
            return self.root / "skills" / name / "SKILL.md"
        return self.root / _DIRS[kind] / f"{name}.md"

    def _parse(self, kind: str, name: str, path: Path, text: str) -> Entry:
        try:
            meta, body = parse_frontmatter(text)
        except ValueError as exc:
            raise HarnessCorrupt(path, str(exc)) from None
        known = _KEYS[kind]
        unknown = sorted(k for k in meta if k not in known)
        if unknown and kind != "skill":
            raise HarnessCorrupt(path, f"unknown key(s) {', '.join(unknown)}; a {kind} has {', '.join(known)}")
        trust = meta.get("trust", "trusted")  # files without the key were written (and reviewed) by a person
        if trust not in TRUST_LEVELS:
            raise HarnessCorrupt(path, f"trust must be trusted or untrusted, not {trust!r}")
        if kind == "skill" and meta.get("name", name) != name:
            raise HarnessCorrupt(path, f"name {meta['name']!r} does not match its directory {name!r}")
        return Entry(kind, name, meta.get("description", ""), body, path, meta.get("source_run", ""), trust,
                     meta.get("model") or None, tuple((k, meta[k]) for k in unknown))

    def _text(self, path: Path) -> str | None:
        if path.is_dir():
            raise HarnessCorrupt(path, "a directory where an entry file belongs")
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise HarnessCorrupt(path, "a file is in the way of the entry's directory") from None
        except UnicodeDecodeError:
            raise HarnessCorrupt(path, "not UTF-8 text") from None

    def get(self, kind: str, name: str) -> Entry | None:
        path = self.path(kind, name)
        text = self._text(path)
        return None if text is None else self._parse(kind, name, path, text)

    def read(self, kind: str, name: str) -> Entry:
        entry = self.get(kind, name)
        if entry is None:
            raise HarnessError(f"no {kind} named {name!r} in the harness at {self.root}")
        return entry

    def list(self, kind: str | None = None) -> builtins.list[Entry]:
        if kind is not None and kind not in KINDS:
            raise HarnessError(f"unknown harness kind {kind!r}; kinds are {', '.join(KINDS)}")
        entries: builtins.list[Entry] = []
        for k in (kind,) if kind else KINDS:
            base = self.root / _DIRS[k]
            if not base.is_dir():
                continue
            for item in sorted(base.iterdir()):
                if item.name.startswith(".") or item.name == "__pycache__":
                    continue
                if k == "skill":
                    if not (item / "SKILL.md").is_file():
                        continue
                    name = item.name
                elif item.suffix == ".md" and item.is_file():
                    name = item.stem
                else:
                    continue
                if not NAME_RE.fullmatch(name):
                    raise HarnessCorrupt(item, f"{name!r} is not a valid entry name (1-64 of [a-z0-9._-])")
                entries.append(self.read(k, name))
        return entries

    # ---- changes ----

    def create(self, kind: str, name: str, content: str, *, source_run: str, description: str | None = None,
               model: str | None = None, trust: str = "trusted", trigger: str = "agent", evidence: str = "",
               rationale: str = "") -> ChangeSet:
        change = Change("create", kind, name, content, evidence, description, model)
        return self.apply([change], source_run=source_run, trigger=trigger, rationale=rationale, trust=trust)

    def update(self, kind: str, name: str, content: str, *, source_run: str, description: str | None = None,
               model: str | None = None, trust: str = "trusted", trigger: str = "agent", evidence: str = "",
               rationale: str = "") -> ChangeSet:
        change = Change("update", kind, name, content, evidence, description, model)
        return self.apply([change], source_run=source_run, trigger=trigger, rationale=rationale, trust=trust)

    def delete(self, kind: str, name: str, *, source_run: str, trigger: str = "agent", evidence: str = "",
               rationale: str = "") -> ChangeSet:
        change = Change("delete", kind, name, evidence=evidence)
        return self.apply([change], source_run=source_run, trigger=trigger, rationale=rationale)

    def apply(self, changes: Sequence[Change], *, source_run: str, trigger: str, rationale: str = "",
              evidence: str = "", trust: str = "trusted") -> ChangeSet:
        """Validate every change, then write them all; on a failed write the before-state is restored."""
        if trust not in TRUST_LEVELS:
            raise HarnessError(f"trust must be trusted or untrusted, not {trust!r}")
        if not changes:
            raise HarnessError("a change set needs at least one operation")
        with self.locked():
            ops: builtins.list[Op] = []
            seen: set[tuple[str, str]] = set()
            for change in changes:
                if (change.kind, change.name) in seen:
                    raise HarnessError(f"{change.kind}:{change.name} is changed twice in one change set")
                seen.add((change.kind, change.name))
                ops.append(self._resolve(change, source_run, trust, change.evidence or evidence))
            return self._commit(ops, source_run=source_run, trigger=trigger, rationale=rationale)

    def _resolve(self, change: Change, source_run: str, trust: str, evidence: str) -> Op:
        if change.op not in OPS:
            raise HarnessError(f"unknown operation {change.op!r}; operations are {', '.join(OPS)}")
        path = self.path(change.kind, change.name)
        before = self._text(path)
        target = f"{change.kind}:{change.name}"
        if change.op == "create" and before is not None:
            raise HarnessError(f"cannot create {target}: it already exists")
        if change.op != "create" and before is None:
            raise HarnessError(f"cannot {change.op} {target}: it does not exist")
        if change.op == "delete":
            return Op("delete", change.kind, change.name, before, None, evidence)
        old = self._parse(change.kind, change.name, path, before) if before is not None else None
        content = change.content.replace("\r\n", "\n")
        meta: dict[str, str] = {}
        if content.startswith("---\n"):
            try:
                meta, content = parse_frontmatter(content)
            except ValueError as exc:
                raise HarnessError(f"{target}: bad frontmatter in the content: {exc}") from None
        if not content.strip():
            raise HarnessError(f"cannot {change.op} {target}: the content is empty")
        first = next(line for line in content.splitlines() if line.strip()).strip().lstrip("#").strip()
        description = change.description or meta.get("description") or (old.description if old else "") or first
        model = change.model or meta.get("model") or (old.model if old else None)
        model = model if change.kind == "subagent" else None
        if model is not None and not MODEL_RE.fullmatch(model):
            raise HarnessError(f"{target}: invalid model id {model!r}")
        extra = dict(old.extra) if old else {}
        if change.kind == "skill":
            extra.update((k, v) for k, v in meta.items() if k not in _KEYS["skill"])
        entry = Entry(change.kind, change.name, one_line(description), content, path, source_run, trust, model,
                      tuple(sorted(extra.items())))
        after = entry.render()
        if after == before:
            raise HarnessError(f"update of {target} changes nothing")
        return Op(change.op, change.kind, change.name, before, after, evidence)

    def _commit(self, ops: Sequence[Op], *, source_run: str, trigger: str, rationale: str,
                rollback_of: str | None = None) -> ChangeSet:
        if trigger not in TRIGGERS:
            raise HarnessError(f"unknown trigger {trigger!r}; triggers are {', '.join(TRIGGERS)}")
        known = {cs.id for cs in self.history()}
        cs_id = f"cs-{secrets.token_hex(4)}"
        while cs_id in known:
            cs_id = f"cs-{secrets.token_hex(4)}"
        cs = ChangeSet(cs_id, now_iso(), source_run, trigger, rationale, tuple(ops), rollback_of)
        done: builtins.list[Op] = []
        try:
            for op in ops:
                self._write(op, op.after)
                done.append(op)
            durable.append_json(self.history_path, cs.to_json())
        except BaseException:
            for op in reversed(done):
                self._write(op, op.before)
            raise
        return cs

    def _write(self, op: Op, text: str | None) -> None:
        path = self.path(op.kind, op.name)
        if text is not None:
            durable.write(path, text)
            return
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise PersistenceError(f"cannot remove {path}: {exc.strerror}") from exc
        if op.kind == "skill":
            with contextlib.suppress(OSError):  # only tidies an empty skill directory; the entry is gone
                path.parent.rmdir()

    @contextmanager
    def locked(self) -> Iterator[None]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise PersistenceError(f"cannot lock the harness at {self.root}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ---- history ----

    def history(self) -> builtins.list[ChangeSet]:
        result: builtins.list[ChangeSet] = []
        for n, data in read_jsonl(self.history_path):
            try:
                result.append(ChangeSet.from_json(data))
            except (KeyError, TypeError, ValueError) as exc:
                raise HarnessCorrupt(self.history_path, f"line {n}: not a change set ({exc})") from None
        return result

    def changeset(self, cs_id: str) -> ChangeSet:
        for cs in self.history():
            if cs.id == cs_id:
                return cs
        raise HarnessError(f"no change set {cs_id!r} in {self.history_path}")

    def rollback(self, cs_id: str, *, source_run: str) -> ChangeSet:
        """Restore the state before change set ``cs_id``; refused when its entries changed since."""
        with self.locked():
            history = self.history()
            index = next((i for i, cs in enumerate(history) if cs.id == cs_id), None)
            if index is None:
                raise HarnessError(f"no change set {cs_id!r} in {self.history_path}")
            later = history[index + 1:]
            ops: builtins.list[Op] = []
            for op in reversed(history[index].ops):
                current = self._text(self.path(op.kind, op.name))
                if current != op.after:
                    undone = [cs.id for cs in later if cs.rollback_of == cs_id]
                    if undone and current == op.before:
                        raise HarnessError(f"{cs_id} was already rolled back by {undone[-1]}")
                    since = [cs.id for cs in later if (op.kind, op.name) in cs.targets]
                    why = f"later change sets {', '.join(since)}" if since else "an edit outside the history"
                    raise HarnessError(f"cannot roll back {cs_id}: {op.target} was changed since by {why}; "
                                       "roll those back first")
                kind = "delete" if op.before is None else "create" if op.after is None else "update"
                ops.append(Op(kind, op.kind, op.name, op.after, op.before, f"rollback of {cs_id}"))
            return self._commit(ops, source_run=source_run, trigger="rollback", rationale=f"rollback of {cs_id}",
                                rollback_of=cs_id)

    def trust(self, kind: str, name: str, *, source_run: str = "") -> ChangeSet | None:
        """Mark an entry trusted after review; None when it already is."""
        with self.locked():
            entry = self.read(kind, name)
            if entry.trusted:
                return None
            before = self._text(entry.path)
            after = Entry(kind, name, entry.description, entry.body, entry.path, entry.source_run, "trusted",
                          entry.model, entry.extra).render()
            op = Op("update", kind, name, before, after, "marked trusted after review")
            return self._commit([op], source_run=source_run, trigger="trust", rationale=f"trust {kind}:{name}")
