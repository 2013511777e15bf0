"""Gate definitions: ``[[gate]]`` TOML files (from the worktree or a commit) and ``--gate`` commands."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prime_ci.durations import parse_duration
from prime_ci.errors import ConfigError
from prime_ci.gates.naming import command_word
from prime_ci.isolation.parse import toml_loads
from prime_ci.isolation.paths import relative_name
from prime_ci.isolation.worktree import read_file_at

DEFAULT_TIMEOUT = 600.0
_NAME = r"^[A-Za-z0-9._-]+$"
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class GateSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_NAME, max_length=100)
    command: str = Field(min_length=1)
    timeout: float = DEFAULT_TIMEOUT
    junit: str | None = None
    reruns: int = Field(default=0, ge=0, le=10)
    env: dict[str, str] = Field(default_factory=dict)
    fast: str | None = Field(default=None, description=(
        "retry rounds first run this instead, with {tests} replaced by the tests that failed (shell-quoted); "
        "pytest commands get one derived when it is not set (see prime_ci.fast_rerun)"))

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("fast")
    @classmethod
    def _fast(cls, value: str | None) -> str | None:
        if value is not None and "{tests}" not in value:
            raise ValueError("must contain {tests} (where the failing test ids go)")
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: object) -> object:
        if isinstance(value, str | int | float):
            try:
                return parse_duration(value, what="timeout")
            except ConfigError as exc:
                raise ValueError(str(exc).split(": ", 1)[-1]) from None
        return value

    @field_validator("junit")
    @classmethod
    def _junit(cls, value: str | None) -> str | None:
        if value is not None and not relative_name(value):
            raise ValueError("must be a path inside the worktree (relative, no '..')")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not _ENV_KEY.match(key) or "\0" in val:
                raise ValueError(f"invalid environment variable {key!r}")
        return value


class BuildSpec(BaseModel):
    """A build: ``--build CMD`` or a ``[[build]]`` table (a gate's name, command, timeout and env rules)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_NAME, max_length=100)
    command: str = Field(min_length=1)
    timeout: float = DEFAULT_TIMEOUT
    env: dict[str, str] = Field(default_factory=dict)

    def as_gate(self) -> GateSpec:
        """A build runs through the gate runner (process group, log, timeout, escapee sweep)."""
        return GateSpec(name=self.name, command=self.command, timeout=self.timeout, env=self.env)


class GateFile(BaseModel):  # a gate file's tables, for ``prime-ci schema gates`` (no docstring: it would show)
    gate: list[GateSpec] = Field(default_factory=list)
    build: list[BuildSpec] = Field(default_factory=list, description="run before every gate round (fast and full)")


class SetupEntry(BaseModel):  # a setup or build command's outcome, as result.json and the session log carry it
    model_config = ConfigDict(extra="allow")
    name: str
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    log: str
    timeout_s: float | None = None


def _describe(exc: ValidationError, index: int, kind: str = "gate") -> str:
    errors = exc.errors()
    err = errors[0]
    loc = ".".join(str(p) for p in err["loc"])
    where = f"{kind}[{index}]" + (f".{loc}" if loc else "")
    if err["type"] == "missing":
        msg = "field required"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field"
    else:
        msg = str(err["msg"]).removeprefix("Value error, ")
        msg = msg[:1].lower() + msg[1:]
    more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
    return f"{where}: {msg}{more}"


def _parse_gate_text(text: str, label: str, seen: dict[str, str]) -> list[GateSpec]:
    try:
        data = toml_loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{label}: invalid TOML: {exc}") from None
    unknown = sorted(set(data) - {"gate", "setup", "build"})
    if unknown:
        raise ConfigError(f"{label}: unknown top-level key {unknown[0]!r} (gate files hold [[gate]], [[setup]], "
                          "[[build]])")
    if "build" in data:
        builds_from_tables(data["build"], label)
    tables = data.get("gate")
    if not tables:
        if "setup" in data or "build" in data:  # [[setup]] (engine.setup) or [[build]] tables (builds_from_texts)
            return []
        raise ConfigError(f"{label}: no [[gate]], [[setup]] or [[build]] tables")
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{label}: gate: must be [[gate]] tables")
    specs = []
    for index, table in enumerate(tables):
        try:
            spec = GateSpec.model_validate(table)
        except ValidationError as exc:
            raise ConfigError(f"{label}: {_describe(exc, index)}") from None
        if spec.name in seen:
            raise ConfigError(
                f"{label}: gate[{index}].name: duplicate gate name {spec.name!r} (also in {seen[spec.name]})"
            )
        seen[spec.name] = label
        specs.append(spec)
    return specs


def load_gate_files(paths: list[Path]) -> list[GateSpec]:
    """Gates from TOML files in the filesystem; ConfigError (one line, file and field) on any problem."""
    seen: dict[str, str] = {}
    specs: list[GateSpec] = []
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{path}: gate file not found") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: gate file is not UTF-8") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read gate file: {exc.strerror}") from None
        specs.extend(_parse_gate_text(text, str(path), seen))
    return specs


def load_gate_files_from_ref(git_dir: Path, ref: str, paths: list[str]) -> list[GateSpec]:
    """Gates from TOML files as committed at ``ref`` (e.g. the PR base): worktree edits cannot change them."""
    seen: dict[str, str] = {}
    specs: list[GateSpec] = []
    for path in paths:
        specs.extend(_parse_gate_text(read_file_at(git_dir, ref, path), f"{ref}:{path}", seen))
    return specs


def builds_from_tables(tables: object, label: str) -> list[BuildSpec]:
    """``[[build]]`` tables: the gate fields' rules for name, command, timeout (a duration) and env."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{label}: build: must be [[build]] tables")
    specs = []
    for index, table in enumerate(tables):
        unknown = sorted(set(table) - set(BuildSpec.model_fields))
        if unknown:
            raise ConfigError(f"{label}: build[{index}].{unknown[0]}: unknown field")
        try:
            gate = GateSpec.model_validate(table)
        except ValidationError as exc:
            raise ConfigError(f"{label}: {_describe(exc, index, 'build')}") from None
        specs.append(BuildSpec(name=gate.name, command=gate.command, timeout=gate.timeout, env=gate.env))
    return specs


def builds_from_texts(texts: list[tuple[str, str]]) -> list[BuildSpec]:
    """The ``[[build]]`` tables of gate files given as (label, text), already checked by the gate loader."""
    specs: list[BuildSpec] = []
    for label, text in texts:
        data = toml_loads(text)
        if "build" in data:
            specs += builds_from_tables(data["build"], label)
    return specs


def collect_builds(items: list[str | dict[str, Any]], file_specs: list[BuildSpec]) -> list[BuildSpec]:
    """``--build`` commands (or a settings file's ``build``: commands or tables), then the gate files'
    ``[[build]]`` tables; names unique."""
    commands = [c for c in items if isinstance(c, str)]
    for position, command in enumerate(commands, start=1):
        if not command.strip():
            raise ConfigError(f"--build #{position}: empty command")
    specs = [BuildSpec(name=g.name, command=g.command) for g in gates_from_commands(commands)]
    specs += builds_from_tables([t for t in items if not isinstance(t, str)], "settings")
    specs += file_specs
    names = [s.name for s in specs]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"duplicate build name(s): {', '.join(dupes)}")
    return specs


def gates_from_commands(commands: list[str]) -> list[GateSpec]:
    """Specs for ``--gate CMD`` flags, named after the command (``pytest``, ``ruff``, ``npm-test``...)."""
    specs: list[GateSpec] = []
    used: set[str] = set()
    for position, command in enumerate(commands, start=1):
        if not command.strip():
            raise ConfigError(f"--gate #{position}: empty command")
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", command_word(command)).strip("-.")[:60]
        name, suffix = slug or f"gate-{position}", position
        while name in used:
            name, suffix = f"{slug or 'gate'}-{suffix}", suffix + 1
        used.add(name)
        specs.append(GateSpec(name=name, command=command))
    return specs
