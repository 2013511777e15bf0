"""What the project's own tools need prepared while setup still has the network (DESIGN §14).

With ``--build``, the project's ``[build-system].requires`` are installed into the run environment by a setup
step of prime-ci's own, named ``build-requires``: a CI install line builds in isolation, so the run environment
never got them, and builds run offline (``setup.py build_ext --inplace`` and ``pip install --no-build-isolation
-e .`` need setuptools-scm, a newer setuptools, Cython...). The names come from the repository under review, so
only plain requirement specifiers are taken (no URLs, paths or options); the step runs in the sandbox like the
operator's setup.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

from prime_ci.engine.setup import SetupSpec
from prime_ci.isolation.parse import toml_loads

BUILD_REQUIRES = "build-requires"
# name[extras] (version specifiers) (; marker): PEP 508 without direct references
_SPECIFIER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._, -]*\])?"
                        r"(?:\s*(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+(?:\s*,\s*(?:===|==|!=|~=|<=|>=|<|>)"
                        r"\s*[A-Za-z0-9.*+!_-]+)*)?(?:\s*;\s*[A-Za-z0-9_.<>=!~'\" ()-]+)?$")


def build_requires(worktree: Path, warn: Callable[[str], None]) -> list[str]:
    """The worktree's ``[build-system].requires``, as plain specifiers; one warning for anything else."""
    path = worktree / "pyproject.toml"
    if not path.is_file() or path.is_symlink():
        return []
    try:
        data = toml_loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return []
    requires = data.get("build-system", {}).get("requires", []) if isinstance(data.get("build-system"), dict) else []
    if not isinstance(requires, list):
        return []
    kept = [r.strip() for r in requires if isinstance(r, str) and _SPECIFIER.match(r.strip())]
    if len(kept) != len(requires):
        warn("pyproject.toml: [build-system].requires entries that are not plain requirement specifiers were not "
             "installed for --build")
    return kept


def build_requires_step(worktree: Path, warn: Callable[[str], None]) -> SetupSpec | None:
    """The setup step that installs the build requirements into the run environment (None: nothing to install)."""
    requires = build_requires(worktree, warn)
    if not requires:
        return None
    command = "python -m pip install --quiet --disable-pip-version-check " + " ".join(map(shlex.quote, requires))
    return SetupSpec(name=BUILD_REQUIRES, command=command, network=True)
