"""Task suites: prime-ci's own TOML/JSONL files and SWE-bench instance files (with a local mirror)."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prime_ci.errors import ConfigError
from prime_ci.isolation.parse import json_loads, toml_loads
from prime_ci.isolation.paths import inside_any
from prime_ci.isolation.worktree import is_url

ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_TEST_COMMAND = "python -m pytest -q -p no:cacheprovider {tests}"


class Task(BaseModel):
    """One task of a suite; paths are resolved against the suite file's directory when it is loaded."""

    model_config = ConfigDict(extra="forbid")
    id: str
    repo: str = Field(description="a git repository (path or URL), or a plain directory the bench commits")
    ref: str | None = None
    task: str | None = None
    task_file: str | None = None
    setup: list[str] = Field(default_factory=list)
    gates: list[str] = Field(default_factory=list)
    gates_file: list[str] = Field(default_factory=list)
    python: str | None = None
    test_patch: str | None = Field(None, description="a diff file, or the diff itself: hidden tests")
    test_command: str | None = None
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    max_turns: int | None = Field(None, ge=1)
    max_wall: str | None = None
    max_cost: float | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, ge=1)
    max_gate_retries: int | None = Field(None, ge=0)
    model: str | None = None
    replay: str | None = Field(None, description="a recorded run directory; {harness} is the harness label")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ID.match(value):
            raise ValueError(f"task id {value!r}: letters, digits, '.', '_', '-' (at most 128)")
        return value

    @field_validator("max_wall", mode="before")
    @classmethod
    def _wall(cls, value: Any) -> Any:
        return None if value is None else str(value)

    def text(self) -> str:
        if self.task is not None:
            return self.task
        assert self.task_file is not None
        return Path(self.task_file).read_text(encoding="utf-8")

    def hidden_tests(self) -> bool:
        return bool(self.test_patch or self.fail_to_pass or self.pass_to_pass)

    def test_ids(self) -> list[str]:
        return [*self.fail_to_pass, *self.pass_to_pass]

    def patch_text(self) -> str | None:
        if not self.test_patch:
            return None
        if "\n" in self.test_patch:
            return self.test_patch
        return Path(self.test_patch).read_text(encoding="utf-8")

    def fingerprint(self) -> str:
        """The definition and the bytes of the files it names (task file, test patch, gate files)."""
        h = hashlib.sha256(self.model_dump_json().encode())
        for name in (self.task_file, self.test_patch, *self.gates_file):
            if name and "\n" not in name and Path(name).is_file():
                h.update(b"\0" + Path(name).read_bytes())
        return h.hexdigest()[:16]

    def replay_dir(self, harness: str) -> Path | None:
        """The recording for ``harness``: ``{harness}`` filled in, else with ``default`` when that is missing."""
        if self.replay is None:
            return None
        path = Path(self.replay.format(harness=harness))
        if not path.is_dir() and "{harness}" in self.replay:
            path = Path(self.replay.format(harness="default"))
        if not (path / "session.jsonl").is_file():
            raise ConfigError(f"task {self.id}: no recorded session at {path / 'session.jsonl'}")
        return path


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    sha256: str
    tasks: list[Task]


def load_suite(path: Path, *, mirror: Path | None = None, task_roots: list[Path] | None = None) -> Suite:
    """A suite file: ``.toml`` (``[defaults]`` + ``[[task]]``), ``.jsonl``/``.json`` of tasks, or SWE-bench
    instances (recognised by ``instance_id``; their repositories are looked up in ``mirror``).

    A task file's text is sent to the model, so it must lie in the suite's directory (symlinks resolved) or in
    one of ``task_roots``, the directories the operator allowed (``--task-files-from``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"suite {path}: {exc.strerror or exc}") from None
    base = path.resolve().parent
    name = path.stem
    if path.suffix == ".toml":
        try:
            doc = toml_loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"suite {path}: {exc}") from None
        unknown = set(doc) - {"name", "description", "defaults", "task"}
        if unknown:
            raise ConfigError(f"suite {path}: unknown top-level keys {sorted(unknown)}")
        name = str(doc.get("name", name))
        defaults = doc.get("defaults", {})
        rows = [{**defaults, **row} for row in doc.get("task", [])]
    else:
        rows = _json_rows(path, data)
    if rows and all("instance_id" in r for r in rows):
        if mirror is None:
            raise ConfigError(f"suite {path}: SWE-bench instances need --mirror DIR (a directory of local clones)")
        rows = [_swe_task(r, mirror) for r in rows]
    roots = [base, *(r.resolve() for r in task_roots or [])]
    tasks = [_task(path, i, row, base, roots) for i, row in enumerate(rows, 1)]
    if not tasks:
        raise ConfigError(f"suite {path}: no tasks")
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise ConfigError(f"suite {path}: task id {t.id!r} appears twice")
        seen.add(t.id)
    return Suite(name, path.resolve(), hashlib.sha256(data).hexdigest(), tasks)


def _json_rows(path: Path, data: bytes) -> list[dict[str, Any]]:
    text = data.decode("utf-8", errors="replace")
    try:
        if path.suffix == ".json":
            rows = json_loads(text)
        else:
            rows = [json_loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"suite {path}: line {exc.lineno}: {exc.msg}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ConfigError(f"suite {path}: expected task objects")
    return rows


def _task(path: Path, index: int, row: dict[str, Any], base: Path, roots: list[Path]) -> Task:
    try:
        task = Task.model_validate(row)
    except ValidationError as exc:
        where = row.get("id", f"#{index}")
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"suite {path}: task {where}: {problems}") from None
    if (task.task is None) == (task.task_file is None):
        raise ConfigError(f"suite {path}: task {task.id}: give exactly one of task, task_file")
    rel = {"task_file": task.task_file, "replay": task.replay}
    if not is_url(task.repo):
        rel["repo"] = task.repo
    if task.test_patch and "\n" not in task.test_patch:
        rel["test_patch"] = task.test_patch
    updates: dict[str, Any] = {k: str(base / v) for k, v in rel.items() if v is not None}
    updates["gates_file"] = [str(base / g) for g in task.gates_file]
    task = task.model_copy(update=updates)
    for key in ("task_file", "test_patch"):
        value = getattr(task, key)
        if value and "\n" not in value and not Path(value).is_file():
            raise ConfigError(f"suite {path}: task {task.id}: {key} not found: {value}")
    if task.task_file and not inside_any(roots, task.task_file, resolve=True):
        raise ConfigError(f"suite {path}: task {task.id}: task_file {task.task_file} is outside the suite's "
                          f"directory {base} (its text is sent to the model): move it there, or allow its "
                          "directory with --task-files-from DIR")
    if not is_url(task.repo) and not Path(task.repo).is_dir():
        raise ConfigError(f"suite {path}: task {task.id}: repository not found: {task.repo}")
    return task


def _ids(value: Any, what: str, instance: Any) -> list[str]:
    """SWE-bench keeps test lists as JSON text in its dataset files."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise ConfigError(f"SWE-bench instance {instance}: {what} is not a JSON list: {exc.msg}") from None
    if not isinstance(value, list | type(None)):
        raise ConfigError(f"SWE-bench instance {instance}: {what} must be a list of test ids")
    return [str(v) for v in value or []]


def _swe_task(row: dict[str, Any], mirror: Path) -> dict[str, Any]:
    missing = [k for k in ("repo", "base_commit", "problem_statement") if not row.get(k)]
    if missing:
        raise ConfigError(f"SWE-bench instance {row.get('instance_id')}: missing {', '.join(missing)}")
    repo = str(row["repo"])
    owner, _, name = repo.partition("/")
    candidates = [mirror / f"{owner}__{name}", mirror / owner / name, mirror / f"{owner}+{name}", mirror / name]
    found = next((c for c in candidates if c.is_dir()), None)
    if found is None:
        raise ConfigError(f"SWE-bench instance {row.get('instance_id')}: no local clone of {repo} under {mirror} "
                          f"(looked for {', '.join(c.name for c in candidates)})")
    task: dict[str, Any] = {
        "id": str(row["instance_id"]), "repo": str(found.resolve()), "ref": str(row["base_commit"]),
        "task": str(row["problem_statement"]), "test_patch": row.get("test_patch") or None,
        "fail_to_pass": _ids(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", row.get("instance_id")),
        "pass_to_pass": _ids(row.get("PASS_TO_PASS"), "PASS_TO_PASS", row.get("instance_id")),
    }
    for key in ("setup", "test_command", "python", "max_turns", "max_wall", "max_cost", "max_tokens",
                "max_gate_retries", "model", "gates"):
        if key in row:
            task[key] = row[key]
    return task
