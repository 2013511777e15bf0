"""What the project's own tools need prepared while setup still has the network (DESIGN §14).

uv, poetry, pdm, tox and nox are recognised by their files. The environment their setup command made (the
worktree's ``.venv``, poetry's under the scratch home, a single ``.tox``/``.nox`` environment) becomes the one the
run's environment is layered on, unless ``--python`` named another; the gates and the kernel get the tools'
offline switches, and the model is told how the tests run.

With ``--build``, the project's ``[build-system].requires`` are installed into the run environment by a setup
step of prime-ci's own, named ``build-requires``: a CI install line builds in isolation, so the run environment
never got them, and builds run offline (``setup.py build_ext --inplace`` and ``pip install --no-build-isolation
-e .`` need setuptools-scm, a newer setuptools, Cython...). With nox in setup, a step named ``wheelhouse``
downloads them instead, into a directory of the run environment that the gates' pip and uv read offline: ``nox
-r`` reinstalls the project every round, building it in isolation. The names come from the repository under
review, so only plain requirement specifiers are taken (no URLs, paths or options); the steps run in the sandbox
like the operator's setup.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.engine import build_hooks
from prime_ci.engine.setup import SetupSpec
from prime_ci.isolation import project_layer
from prime_ci.isolation.parse import toml_loads
from prime_ci.isolation.paths import relative_name

BUILD_REQUIRES = "build-requires"
WHEELHOUSE = "wheelhouse"  # the setup step, and its directory in the run environment
BYTECODE = "bytecode"
_SPECIFIER = build_hooks.SPECIFIER
# PEP 517's backend when pyproject.toml names none; a backend is a module path with an optional object path
_LEGACY_BACKEND = "setuptools.build_meta:__legacy__"
_BACKEND = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?::[A-Za-z_][A-Za-z0-9_.]*)?$")


def _build_system(worktree: Path) -> dict[str, Any]:
    path = worktree / "pyproject.toml"
    if not path.is_file() or path.is_symlink():
        return {}
    try:
        data = toml_loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {}
    section = data.get("build-system")
    return section if isinstance(section, dict) else {}


def build_requires(worktree: Path, warn: Callable[[str], None]) -> list[str]:
    """The worktree's ``[build-system].requires``, as plain specifiers; one warning for anything else."""
    requires = _build_system(worktree).get("requires", [])
    if not isinstance(requires, list):
        return []
    kept = [r.strip() for r in requires if isinstance(r, str) and _SPECIFIER.match(r.strip())]
    if len(kept) != len(requires):
        warn("pyproject.toml: [build-system].requires entries that are not plain requirement specifiers were not "
             "installed for --build")
    return kept


def _backend(worktree: Path) -> list[str] | None:
    """The build backend and its ``backend-path`` entries, when they are plain names (``build_hooks``' arguments)."""
    system = _build_system(worktree)
    backend = system.get("build-backend", _LEGACY_BACKEND)
    paths = system.get("backend-path", [])
    if isinstance(backend, str) and _BACKEND.match(backend) and isinstance(paths, list) \
            and all(isinstance(p, str) and relative_name(p) for p in paths):
        return [backend, *paths]
    return None


def build_requires_step(worktree: Path, warn: Callable[[str], None]) -> SetupSpec | None:
    """The setup step that installs the build requirements into the run environment (None: nothing to install):
    [build-system].requires, then what the backend's own hooks ask for (``build_hooks``), as an isolated build
    would have them."""
    requires = build_requires(worktree, warn)
    if not requires:
        return None
    command = "python -m pip install --quiet --disable-pip-version-check " + " ".join(map(shlex.quote, requires))
    if (backend := _backend(worktree)) is not None:
        command += " && " + " ".join(map(shlex.quote, ["python", build_hooks.__file__, *backend]))
    return SetupSpec(name=BUILD_REQUIRES, command=command, network=True)


def wheelhouse_step(worktree: Path, directory: Path, setup: list[SetupSpec],
                    warn: Callable[[str], None]) -> SetupSpec | None:
    """With nox preparing the environment in setup: the step that downloads the project's build requirements
    (and what the backend's hooks add) into ``directory``, which the gates' pip and uv then read (``find_links``).
    ``nox -r`` reinstalls the project every round; with nox's default backend that is pip's isolated build, which
    fetches [build-system].requires from the index: offline it failed on them (pypa/installer's flit_core), and
    ``-R`` would test the copy setup installed. None: no nox in setup, or nothing to build with."""
    if not any(_runs_nox(s.command) for s in setup):
        return None
    legacy = not _build_system(worktree) and (worktree / "setup.py").is_file()
    requires = ["setuptools>=40.8.0"] if legacy else build_requires(worktree, warn)  # pip's default for setup.py
    backend = _backend(worktree)
    if not requires or backend is None:
        return None
    command = ["python", build_hooks.__file__, "--wheelhouse", str(directory), *backend, "--", *requires]
    return SetupSpec(name=WHEELHOUSE, command=" ".join(map(shlex.quote, command)), network=True)


def _runs_nox(command: str) -> bool:
    """Whether a command line runs nox: ``nox``, a path to it, ``python -m nox``, ``pipx run nox``, ``uvx nox``."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return any(word.rsplit("/", 1)[-1] == "nox" for word in words)


def bytecode_step(worktree: Path, run_root: Path, setup: list[SetupSpec]) -> SetupSpec | None:
    """After the setup of a project driven by its own tools: the step that gives the environments they made
    (the worktree's ``.venv``, ``.nox/*``, ``.tox/*``, poetry's under the scratch home) the run's bytecode rule
    (``project_layer.install``). Their interpreters run the gates directly, not layered on the run's, so the
    gates' pycache prefix held every ``.pyc`` they wrote: pypa/installer's tests, which install a wheel into their
    tmp_path with bytecode compiled and look for the ``.pyc`` files there, failed in every round."""
    if not setup or not recognise(worktree):
        return None
    envs = " ".join(shlex.quote(p) for p in project_layer.TOOL_ENVS)
    command = (f"python {shlex.quote(project_layer.__file__)} {shlex.quote(str(run_root))} {envs} "
               '"$HOME/.cache/pypoetry/virtualenvs/*"')
    return SetupSpec(name=BYTECODE, command=command, network=False)


def find_links(directory: Path) -> dict[str, str]:
    """The gates' and the kernel's pip and uv read the wheelhouse setup filled, if it did."""
    return {"PIP_FIND_LINKS": str(directory), "UV_FIND_LINKS": str(directory)} if directory.is_dir() else {}


@dataclass(frozen=True)
class Toolchain:
    """A project tool recognised by its files: where the environment its setup command makes lives, how the gates
    keep it offline, and how the model runs the tests with it."""

    name: str
    marker: str  # the file that names it
    setup: str  # the command its CI runs to prepare (shown in the README's table and the prompt)
    test: str  # how its tests run once prepared, offline
    offline: dict[str, str] = field(default_factory=dict)
    writes: bool = False  # running the tests writes in its environment (logs, the project reinstalled)
    # it installs into an activated environment (VIRTUAL_ENV) when there is one, instead of making its own
    takes_active: bool = False
    # it warns on every run that an activated environment other than the one it made is ignored: once setup made
    # its environment, that one is the gates' and the cells' VIRTUAL_ENV
    warns_active: bool = False

    def environment(self, worktree: Path, home: Path) -> Path | None:
        """The virtual environment setup made for it, if exactly one is there."""
        found = [worktree / ".venv"] if (worktree / ".venv" / "pyvenv.cfg").is_file() else []
        if self.name == "poetry" and not found:
            found = sorted(p for p in (home / ".cache" / "pypoetry" / "virtualenvs").glob("*")
                           if (p / "pyvenv.cfg").is_file())
        elif self.name in ("tox", "nox") and not found:
            found = sorted(p for p in (worktree / f".{self.name}").glob("*")
                           if (p / "pyvenv.cfg").is_file() and not p.name.startswith("."))
        return found[0] if len(found) == 1 else None


# offline switches: uv and pip fail at once, with a line exit 10 recognises, instead of trying the resolver
_PIP_OFFLINE = {"PIP_NO_INDEX": "1", "UV_OFFLINE": "1"}
TOOLCHAINS = (
    Toolchain("uv", "uv.lock", "uv sync --frozen", "uv run --offline pytest", {"UV_OFFLINE": "1"}, warns_active=True),
    Toolchain("poetry", "poetry.lock", "poetry install", "poetry run pytest", _PIP_OFFLINE, takes_active=True),
    # pdm too reuses an activated environment (pdm-backend's `pdm sync` installed into the run environment)
    Toolchain("pdm", "pdm.lock", "pdm install", "pdm run pytest", _PIP_OFFLINE, takes_active=True),
    # the project's wheel is rebuilt offline in tox's .pkg environment each round (an sdist's build would fetch its
    # build requirements; --skip-pkg-install would test the copy setup installed)
    Toolchain("tox", "tox.ini", "tox -e py --notest -x testenv.package=wheel", "tox -e py -x testenv.package=wheel",
              _PIP_OFFLINE, writes=True),
    # -r reuses the environment and reinstalls the project (offline with nox's uv backend); -R skips installs
    Toolchain("nox", "noxfile.py", "nox -s SESSION --install-only", "nox -s SESSION -r", _PIP_OFFLINE, writes=True),
)


def recognise(worktree: Path) -> list[Toolchain]:
    """The toolchains the worktree's files name (``[tool.tox]`` and ``tox.toml`` count as tox's)."""
    found = [t for t in TOOLCHAINS if (worktree / t.marker).is_file()]
    tox = next(t for t in TOOLCHAINS if t.name == "tox")
    if tox not in found and ((worktree / "tox.toml").is_file() or _pyproject_has(worktree, "tox")):
        found.append(tox)
    return found


def _pyproject_has(worktree: Path, tool: str) -> bool:
    path = worktree / "pyproject.toml"
    try:
        data = toml_loads(path.read_text(encoding="utf-8")) if path.is_file() and not path.is_symlink() else {}
    except (ValueError, UnicodeDecodeError):
        return False
    section = data.get("tool")
    return isinstance(section, dict) and tool in section


def named(toolchains: list[Toolchain], commands: list[str]) -> list[Toolchain]:
    """The toolchains a setup, gate or build command runs by name (`uv sync`, `python -m tox`, `/opt/bin/nox`): a
    repository may carry the files of several (pytest-dev/pluggy: a uv.lock beside the tox.ini its CI runs), and
    the model is told how to run the tests with those the run uses, not with a tool that is not even installed."""
    text = "\n".join(commands)
    return [t for t in toolchains if re.search(rf"(?<![\w.-]){re.escape(t.name)}(?![\w.-])", text)]


def unset_env(toolchains: list[Toolchain]) -> list[str]:
    """What setup, the gates and the kernel must not have for the tools to make their own environment: the run
    environment's VIRTUAL_ENV would have poetry install the project there, beside poetry's own packages."""
    return ["VIRTUAL_ENV"] if any(t.takes_active for t in toolchains) else []


def offline_env(toolchains: list[Toolchain]) -> dict[str, str]:
    """What the gates' and the kernel's environment get so that the tools stay offline."""
    out: dict[str, str] = {}
    for toolchain in toolchains:
        out.update(toolchain.offline)
    return out


def prompt_note(toolchains: list[Toolchain], adopted: tuple[Toolchain, Path] | None, *,
                sandboxed: bool = False) -> list[str]:
    """The system prompt's lines on the project's own tools (``sandboxed``: the environment setup made is read-only
    in the model's cells, so a tool that writes in it runs through the gates)."""
    lines: list[str] = []
    if adopted is not None:
        toolchain, env = adopted
        lines.append(f"The project uses {toolchain.name} ({toolchain.marker}); setup made its environment at {env}, "
                     f"and `python`, `pip` and `pytest` above are layered on it, so its packages are importable.")
    for toolchain in toolchains:
        offline = f"- {toolchain.name}: its tools stay offline here ({', '.join(sorted(toolchain.offline))}); "
        if sandboxed and toolchain.writes:
            lines.append(offline + f"it writes in its environment, which is read-only in your cells: run its tests "
                         f"as the gates do, with `await gates.run()` (like `{toolchain.test}`).")
        else:
            lines.append(offline + f"run its tests with `{toolchain.test}` or as the gates do.")
    return lines
