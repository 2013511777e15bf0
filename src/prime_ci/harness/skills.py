"""Skills: discovery (the package's built-ins and the harness) and their installation into the kernel.

A skill is a directory with a ``SKILL.md`` (frontmatter ``name``, ``description``). A Python-backed skill
also has ``pyproject.toml`` and ``src/<package>/__init__.py``: its ``src`` directory goes on the kernel's
``PYTHONPATH`` (no pip, no network) and the package is imported under its own name at kernel start.
Skills never load from the worktree under review: discovery only looks at the two roots it is given.
"""

from __future__ import annotations

import json
import keyword
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prime_ci.harness.frontmatter import one_line, parse_frontmatter
from prime_ci.harness.store import NAME_RE
from prime_ci.isolation.paths import inside

# In a wheel this is a real directory; in a source checkout a symlink to the top-level skills/.
BUILTIN_DIR = Path(__file__).parents[1] / "builtin_skills"


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path  # the SKILL.md file
    package: str | None  # importable name of its Python package, if it has one
    src_dir: Path | None  # the directory that holds the package (goes on PYTHONPATH)
    origin: str  # "builtin" | "harness"


def _package(skill_dir: Path, name: str) -> tuple[str | None, Path | None, str | None]:
    """(package, src dir, problem) of a Python-backed skill; all None for a documentation-only skill."""
    src = skill_dir / "src"
    if not (skill_dir / "pyproject.toml").is_file() or not src.is_dir():
        return None, None, None
    found = sorted(p.name for p in src.iterdir() if (p / "__init__.py").is_file() and p.name.isidentifier())
    preferred = name.replace("-", "_").replace(".", "_")
    if len(found) == 1:
        package = found[0]
    elif preferred in found:
        package = preferred
    else:
        return None, None, f"expected one package in {src}, found {found or 'none'}"
    if keyword.iskeyword(package) or package in sys.stdlib_module_names or package == "prime_ci":
        return None, None, f"package name {package!r} would shadow a standard-library or prime-ci module"
    return package, src, None


def _load(skill_dir: Path, origin: str, warnings: list[str]) -> Skill | None:
    path = skill_dir / "SKILL.md"
    name = skill_dir.name
    where = f"skill {name!r} ({origin}, {path})"
    if not NAME_RE.fullmatch(name):
        warnings.append(f"{where}: skipped, directory name is not a valid skill name")
        return None
    try:
        meta, _ = parse_frontmatter(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        warnings.append(f"{where}: skipped, bad SKILL.md: {exc}")
        return None
    if meta.get("name", name) != name:
        warnings.append(f"{where}: frontmatter name {meta['name']!r} differs from the directory; using {name!r}")
    description = one_line(meta.get("description", ""), 1024)
    if not description:
        warnings.append(f"{where}: skipped, SKILL.md has no description")
        return None
    if meta.get("trust", "trusted") != "trusted":
        warnings.append(f"{where}: skipped, untrusted until reviewed (prime-ci harness trust skill {name})")
        return None
    package, src, problem = _package(skill_dir, name)
    if problem:
        warnings.append(f"{where}: skipped, {problem}")
        return None
    return Skill(name, description, path, package, src, origin)


def _scan(root: Path, origin: str, worktree: Path | None, warnings: list[str]) -> list[Skill]:
    if not root.is_dir():
        return []
    found: list[Skill] = []
    for skill_dir in sorted(root.iterdir()):
        if skill_dir.name.startswith(".") or not (skill_dir / "SKILL.md").is_file():
            continue
        if worktree is not None and inside(worktree, skill_dir, resolve=True):
            warnings.append(f"skill {skill_dir.name!r} ({skill_dir}): skipped, it lies inside the worktree")
            continue
        skill = _load(skill_dir, origin, warnings)
        if skill is not None:
            found.append(skill)
    return found


def discover(
    harness_root: Path | None, *, builtin_dir: Path = BUILTIN_DIR, worktree: Path | None = None
) -> tuple[list[Skill], list[str]]:
    """Built-in skills plus ``<harness>/skills/`` (a harness skill overrides a built-in of the same name).

    Returns the skills sorted by name and the warnings about skills that were skipped. ``worktree``: skills
    that resolve to a path inside it are refused (e.g. a harness directory placed in the checkout).
    """
    warnings: list[str] = []
    by_name = {s.name: s for s in _scan(builtin_dir, "builtin", worktree, warnings)}
    if harness_root is not None:
        by_name.update({s.name: s for s in _scan(harness_root / "skills", "harness", worktree, warnings)})
    skills: list[Skill] = []
    packages: dict[str, str] = {}
    for name in sorted(by_name):
        skill = by_name[name]
        if skill.package is not None and skill.package in packages:
            warnings.append(f"skill {name!r}: skipped, package {skill.package!r} is already provided by skill "
                            f"{packages[skill.package]!r}")
            continue
        if skill.package is not None:
            packages[skill.package] = name
        skills.append(skill)
    return skills, warnings


def kernel_pythonpath(skills: Sequence[Skill]) -> list[str]:
    """The ``src`` directories of Python-backed skills, for the kernel's PYTHONPATH."""
    paths: list[str] = []
    for skill in skills:
        if skill.src_dir is not None and str(skill.src_dir) not in paths:
            paths.append(str(skill.src_dir))
    return paths


_PRELOAD = '''
def _prime_ci_load_skills(names):
    import importlib
    import types

    class SkillModule(types.ModuleType):
        """A skill package: calling it calls its run() (await the result when run is async)."""

        def __call__(self, *args, **kwargs):
            return self.run(*args, **kwargs)

    failed = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        if callable(getattr(module, "run", None)) and type(module) is types.ModuleType:
            module.__class__ = SkillModule
        globals()[name] = module
    return failed


skill_import_errors = _prime_ci_load_skills(%s)
del _prime_ci_load_skills
'''


def kernel_preload(skills: Sequence[Skill]) -> str:
    """Kernel start-up code: import each skill package by name into the user namespace.

    A package with a module-level ``run`` becomes callable (``await prime_x(...)`` for an async ``run``,
    a plain call for a sync one). Packages that fail to import are listed in ``skill_import_errors``
    instead of stopping the kernel.
    """
    names = [s.package for s in skills if s.package is not None]
    return _PRELOAD % json.dumps(names) if names else ""


def index_text(skills: Sequence[Skill]) -> str:
    """One line per skill for the system prompt: name, description, SKILL.md path, preloaded package."""
    lines = []
    for s in skills:
        line = f"- {s.name}: {one_line(s.description, 300)} (read {s.path})"
        if s.package:
            line += f"; preloaded as `{s.package}`"
        lines.append(line)
    return "\n".join(lines)
