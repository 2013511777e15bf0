"""Run settings: command-line flags over ``prime-ci.toml`` / ``[tool.prime-ci]``, validated with pydantic."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from prime_ci.durations import format_duration, parse_duration
from prime_ci.errors import ConfigError
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.parse import toml_loads
from prime_ci.isolation.paths import relative_name
from prime_ci.model import table
from prime_ci.model.usage import UserPrice
from prime_ci.money import usd


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repo: str = "."
    ref: str | None = None
    task: str | None = None
    task_file: Path | None = None
    untrusted_file: Path | None = None
    from_session: Path | None = None
    model: str | None = None
    api_base: str | None = None
    gate: list[str] = Field(default_factory=list)
    gates_file: list[str] = Field(default_factory=list)
    gates_from: str | None = None
    gate_timeout: float | None = None
    max_turns: int = Field(40, ge=1)
    max_tokens: int = Field(2_000_000, ge=1)
    max_wall: float = 1800.0
    max_cost: float | None = Field(None, gt=0)
    cell_timeout: float = 300.0
    model_timeout: float = 300.0
    max_gate_retries: int = Field(3, ge=0)
    max_depth: int = Field(1, ge=0)
    max_children: int = Field(4, ge=1)
    context_window: int | None = Field(None, ge=1000)
    max_completion_tokens: int | None = Field(None, ge=16)
    cache: bool = True
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    price_per_mtok: str | None = None
    seed: int | None = None
    out: Path | None = None
    harness: Path | None = None
    harness_branch: str | None = None
    propose: bool = False
    push: bool = False
    refine: bool = False
    sandbox: Literal["auto", "on", "off"] = "auto"
    pass_env: list[str] = Field(default_factory=list)
    require_changes: bool = False
    allow_protected: list[str] = Field(default_factory=list)
    keep_worktree: bool = False
    json_output: bool = False
    verbose: bool = False  # -v: each cell's code, its output's head and the model's text on the console
    quiet: bool = False  # -q: the verdict (and warnings) only
    setup: list[str | dict[str, Any]] = Field(default_factory=list)
    build: list[str | dict[str, Any]] = Field(default_factory=list)
    python: str | None = None
    sandbox_ro: list[str] = Field(default_factory=list)
    include_dirty: bool = False
    # every kernel's, gate's and setup command's box: ``--limits`` over PRIME_CI_LIMITS over the defaults, resolved
    # once by ``prepare``; never from repository settings (not a REPO_KEY); recorded, so a resumed run keeps them
    limits: Limits = Field(default_factory=Limits)

    @field_validator("max_wall", "cell_timeout", "model_timeout", "gate_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any, info: ValidationInfo) -> float | None:
        return None if value is None else parse_duration(value, what=f"--{str(info.field_name).replace('_', '-')}")

    def task_text(self) -> str:
        """The task given on the command line ("" when a run only continues ``--from-session``)."""
        if self.task is not None:
            return self.task
        if self.task_file is None:
            return ""
        return self.task_file.read_text(encoding="utf-8", errors="replace")


# The repository may be the hostile input under review: it may add gates, builds and setup, tighten budgets and pick
# options that cannot weaken the boundary, redirect output, choose the model or the task, or name host files.
REPO_KEYS = {"gate", "gates_file", "setup", "build", "python", "sandbox_ro", "require_changes", "context_window",
             "cache", "reasoning_effort", "max_turns", "max_tokens", "max_wall", "max_cost", "cell_timeout",
             "max_gate_retries", "max_depth", "max_children", "max_completion_tokens"}
LOWER_ONLY = ("max_turns", "max_tokens", "max_wall", "max_cost", "cell_timeout", "max_gate_retries", "max_depth",
              "max_children", "max_completion_tokens")
ALIASES = {"gates": "gate", "gates_files": "gates_file", "gates-file": "gates_file"}


Warn = Callable[[str], None]
# the repository may name its interpreter by command name only: a host program run with ``-I -c`` to probe it
_PYTHON_NAME = re.compile(r"(python|pypy)[0-9.]*")


def file_settings(repo_dir: Path, warn: Warn) -> dict[str, Any]:
    """Settings from ``prime-ci.toml`` (preferred) or ``pyproject.toml [tool.prime-ci]`` in repo_dir.

    The repository is input under review, so nothing in it can stop a run: a setting it may not set, or sets
    malformed, is left out with one warning naming it; a file that is not TOML is ignored whole."""
    for name, pick in (("prime-ci.toml", lambda d: d), ("pyproject.toml", _tool_section)):
        path = repo_dir / name
        if not path.is_file() or path.is_symlink():
            continue
        try:
            data = toml_loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            warn(f"{name}: not valid TOML ({str(exc).splitlines()[0][:120]}): the repository's settings are "
                 "ignored")
            return {}
        section = pick(data)
        if section is None:
            continue
        out: dict[str, Any] = {}
        for key, value in section.items():
            norm = ALIASES.get(key, key).replace("-", "_")
            if norm == "sandbox" and isinstance(value, dict):
                norm, value = "sandbox_ro", value.get("read", [])
                if unknown := sorted(set(section[key]) - {"read"}):
                    warn(f"{name}: sandbox.{unknown[0]} ignored: unknown setting (the sandbox mode is a "
                         "command-line flag)")
            if problem := _repo_problem(norm, value):
                warn(f"{name}: {key!r} ignored: {problem}")
                continue
            out[norm] = value
        return out
    return {}


def _repo_problem(norm: str, value: Any) -> str | None:
    """Why the repository may not set ``norm`` to ``value`` (None: it may)."""
    if norm in RunConfig.model_fields and norm not in REPO_KEYS:
        return ("may only be set by the operator (the repository's own settings cannot choose the model, the task, "
                "files outside the worktree or the sandbox)")
    if norm not in REPO_KEYS:
        return "unknown setting"
    if norm == "python" and not (isinstance(value, str) and _PYTHON_NAME.fullmatch(value)):
        return ("a python command name found on PATH (e.g. 'python3.12'), not a path or another program: "
                "use --python")
    if norm == "sandbox_ro" and (not isinstance(value, list) or not all(isinstance(p, str) for p in value)):
        return "sandbox.read must be a list of paths"
    if norm in ("sandbox_ro", "gates_file") and isinstance(value, list):
        for p in value:
            if not isinstance(p, str) or p.startswith("~") or not relative_name(p):
                return f"{p!r}: repository settings may only name paths inside the worktree"
    try:
        RunConfig.model_validate({norm: value})
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    except ConfigError as exc:  # the duration fields' own check
        return str(exc).split(": ", 1)[-1]
    return None


def _validated(settings: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig(**settings)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "settings"
        raise ConfigError(f"--{where.replace('_', '-')}: {err['msg']}") from None


def _task_problem(text: str) -> str | None:
    if not text.strip():
        return "the task is empty"
    if "\x00" in text or text.count("\ufffd") > len(text) // 100 or sum(
            1 for c in text if ord(c) < 32 and c not in "\n\r\t") > len(text) // 100:
        return "the task is not text (binary content)"
    return None


def _tool_section(data: dict[str, Any]) -> dict[str, Any] | None:
    tool = data.get("tool")
    section = tool.get("prime-ci") if isinstance(tool, dict) else None
    return section if isinstance(section, dict) else None


def _shown(key: str, value: float | None) -> str:
    """A budget as the operator writes it: durations like --max-wall, money like the summary."""
    if value is None or key not in ("max_wall", "cell_timeout", "max_cost"):
        return str(value)
    return usd(value) if key == "max_cost" else format_duration(value)


def build_config(flags: dict[str, Any], from_file: dict[str, Any], warn: Warn) -> RunConfig:
    """Flags (only those given explicitly) win over file settings; defaults fill the rest. The repository's
    budgets may only lower the operator's (the flag, else the default): a higher one is ignored with a warning."""
    operator = _validated(flags)
    repo = dict(from_file)
    for key in LOWER_ONLY:
        if key in repo and key not in flags:
            mine, theirs = getattr(operator, key), getattr(_validated({key: repo[key]}), key)
            if mine is not None and (theirs is None or theirs > mine):
                warn(f"repository settings: {key.replace('_', '-')} = {_shown(key, theirs)} ignored: it would "
                     f"raise the operator's {_shown(key, mine)} (a repository may only lower budgets)")
                del repo[key]
    cfg = _validated({**repo, **flags})
    if cfg.task is not None and cfg.task_file is not None:
        raise ConfigError("exactly one of --task or --task-file is required")
    if cfg.task is None and cfg.task_file is None and cfg.from_session is None:
        raise ConfigError("exactly one of --task or --task-file is required (or --from-session)")
    if cfg.task_file is not None and not cfg.task_file.is_file():
        raise ConfigError(f"--task-file: file not found: {cfg.task_file}")
    if (cfg.task is not None or cfg.task_file is not None) and (problem := _task_problem(cfg.task_text())):
        raise ConfigError(f"--task{'-file' if cfg.task_file is not None else ''}: {problem}")
    if cfg.untrusted_file is not None and not cfg.untrusted_file.is_file():
        raise ConfigError(f"--untrusted-file: file not found: {cfg.untrusted_file}")
    if not cfg.model:
        raise ConfigError("--model is required (or PRIME_CI_MODEL)")
    if cfg.price_per_mtok is not None:
        try:
            UserPrice.parse(cfg.price_per_mtok)
        except ValueError as exc:
            raise ConfigError(f"--price-per-mtok: {exc}") from None
    if cfg.max_cost is not None and cfg.price_per_mtok is None and not cfg.model.startswith("replay:") \
            and not table.is_priced(cfg.model):
        if "max_cost" not in flags:
            warn(f"repository settings: max-cost = {usd(cfg.max_cost)} ignored: the price of {cfg.model} is unknown "
                 "(the operator may pass --price-per-mtok)")
            cfg = cfg.model_copy(update={"max_cost": None})
        else:
            raise ConfigError(f"--max-cost: the price of {cfg.model} is unknown (litellm's model table does not "
                              "list it), so spend cannot be capped: pass --price-per-mtok IN,OUT[,CACHED] (USD per "
                              "million tokens), or drop --max-cost")
    if cfg.propose and not cfg.harness_branch:
        raise ConfigError("--propose needs --harness-branch")
    return cfg
