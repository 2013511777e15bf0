"""The project's own environment: its interpreter, and a run environment layered on it.

Gates, setup commands and the kernel's shell resolve ``python``/``pip``/``pytest`` to the *project's*
interpreter (``--python``; default REPO's ``.venv``, else the job's PATH as prime-ci found it), never to
prime-ci's own. Each run gets a small virtual environment outside the worktree, layered on that interpreter:
its own ``site-packages`` comes first (``pip install -e .`` in setup lands there, pointing at the worktree),
then the interpreter's package directories, so whatever the job installed is visible and nothing a run
installs touches the job's or prime-ci's environment. Editable installs that point at the job's checkout are
redirected to the worktree (see ``project_layer``). Console scripts of the interpreter get twins in the
environment's ``bin`` so that ``pytest`` and friends run with the layering too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prime_ci.errors import ConfigError
from prime_ci.isolation import project_layer

_PROBE = (
    "import json, sys, sysconfig\n"
    "print(json.dumps({'executable': sys.executable, 'base': getattr(sys, '_base_executable', sys.executable),"
    " 'version': '.'.join(map(str, sys.version_info[:3])), 'prefix': sys.prefix, 'base_prefix': sys.base_prefix,"
    " 'sites': [p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))],"
    " 'stdlib': sysconfig.get_path('stdlib'), 'scripts': sysconfig.get_path('scripts')}))\n"
)
MAX_SCRIPT = 64 * 1024


@dataclass(frozen=True)
class Interpreter:
    executable: str
    base: str
    version: str
    prefix: str
    base_prefix: str
    sites: tuple[str, ...]
    stdlib: str
    scripts: str

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def dirs(self) -> list[str]:
        """What must be readable for it to run (inside the sandbox too)."""
        found = {self.prefix, self.base_prefix, self.stdlib, self.scripts, *self.sites,
                 os.path.dirname(self.executable), os.path.dirname(os.path.realpath(self.base))}
        return sorted(d for d in found if d and os.path.isdir(d))


def find_python(explicit: str | None, repo: Path | None, path: str | None = None) -> str:
    """The interpreter to use: ``--python``, else REPO's ``.venv``, else ``python3``/``python`` on the job's PATH."""
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    if explicit:
        found = shutil.which(explicit, path=search) if os.sep not in explicit else explicit
        if not found or not os.access(found, os.X_OK):
            raise ConfigError(f"--python: interpreter not found: {explicit}")
        return os.path.abspath(found)
    if repo is not None:
        venv = repo / ".venv" / "bin" / "python"
        if venv.exists() and os.access(venv, os.X_OK):
            return str(venv)
    for name in ("python3", "python"):
        found = shutil.which(name, path=search)
        if found:
            return found
    return sys.executable


def probe(python: str) -> Interpreter:
    try:
        proc = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                              check=False, encoding="utf-8", errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"--python: cannot run {python}: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise ConfigError(f"--python: {python} is not a working Python: {detail}")
    info: dict[str, Any] = json.loads(proc.stdout)
    return Interpreter(info["executable"], info["base"], info["version"], info["prefix"], info["base_prefix"],
                       tuple(info["sites"]), info["stdlib"], info["scripts"])


def probe_made(venv: Path) -> Interpreter:
    """``probe`` for a virtual environment the run's own setup made (untrusted: the repository's setup may have
    written it): without ``site``, so no ``.pth`` of it runs on the host. ``site`` is also what makes a venv's
    prefix, so the venv's own layout gives its prefix, site directory and scripts."""
    python = venv / "bin" / "python"
    try:
        proc = subprocess.run([str(python), "-I", "-S", "-c", _PROBE], capture_output=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False, encoding="utf-8", errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run {python}: {exc}") from None
    if proc.returncode != 0:
        raise ConfigError(f"{python} is not a working Python: exit {proc.returncode}")
    info: dict[str, Any] = json.loads(proc.stdout)
    minor = ".".join(info["version"].split(".")[:2])
    site = venv / "lib" / f"python{minor}" / "site-packages"
    return Interpreter(str(python), info["base"], info["version"], str(venv), info["base_prefix"], (str(site),),
                       info["stdlib"], str(venv / "bin"))


@dataclass
class ProjectEnv:
    """The run's environment directory (``root``) layered on ``interp``."""

    interp: Interpreter
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def site(self) -> Path:
        return self.root / "lib" / f"python{self.interp.minor}" / "site-packages"

    def kernel_site(self) -> str | None:
        """The directory the kernel adds after its own packages, when the Python versions match."""
        same = self.interp.minor == f"{sys.version_info[0]}.{sys.version_info[1]}"
        return str(self.site) if same else None

    def env(self, path: str) -> dict[str, str]:
        return {"PATH": os.pathsep.join([str(self.bin), path]), "VIRTUAL_ENV": str(self.root)}

    def readable(self) -> list[str]:
        return [*self.interp.dirs(), str(self.root)]

    def describe(self) -> str:
        kernel = ("`import` in the kernel sees the same packages (after the kernel's own)" if self.kernel_site()
                  else f"the kernel runs Python {sys.version.split()[0]}, so import the project's packages in "
                  "`!python` commands rather than in the kernel")
        return (f"`python`, `pip`, `pytest` and the project's console scripts resolve to {self.python} (a run "
                f"environment layered on the project's Python {self.interp.version}, {self.interp.executable}); "
                f"{kernel}.")

    def to_json(self) -> dict[str, Any]:
        return {"root": str(self.root), "interp": self.interp.__dict__ | {"sites": list(self.interp.sites)}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProjectEnv:
        raw = dict(data["interp"])
        raw["sites"] = tuple(raw["sites"])
        return cls(Interpreter(**raw), Path(data["root"]))


def create(root: Path, interp: Interpreter, redirect: tuple[str, str] | None) -> ProjectEnv:
    """Write a virtual environment at ``root`` by hand (a venv is a pyvenv.cfg and a symlink: ~1 ms, where
    ``python -m venv`` takes ~100 ms) with the layering hook and console-script twins. The directory holding
    ``root`` is the run's own (worktree, home, this environment): its bytecode is never trusted, while the
    interpreter's own directories keep theirs (see ``project_layer.trust_host_bytecode``)."""
    env = ProjectEnv(interp, root)
    env.bin.mkdir(parents=True, exist_ok=True)
    env.site.mkdir(parents=True, exist_ok=True)
    base = os.path.realpath(interp.base)
    (root / "pyvenv.cfg").write_text(f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n"
                                     f"version = {interp.version}\n", encoding="utf-8")
    for name in ("python", "python3", f"python{interp.minor}"):
        (env.bin / name).symlink_to(base)
    # the job's virtualenv may live inside the checkout (REPO/.venv): its packages are not the project's
    # sources, and the clone has no copy of them
    layer = {"sites": list(interp.sites), "redirect": list(redirect) if redirect else None,
             "keep": [interp.prefix, os.path.realpath(interp.prefix)]}
    (env.site / project_layer.CONFIG).write_text(json.dumps(layer), encoding="utf-8")
    (env.site / project_layer.BYTECODE).write_bytes(_bytecode_roots(interp, root))
    shutil.copyfile(project_layer.__file__, env.site / "_prime_ci_layer.py")
    hook = "import _prime_ci_layer; _prime_ci_layer.hook()\n"
    (env.site / "_prime_ci_layer.pth").write_text(hook, encoding="utf-8")
    _script_twins(interp, env)
    return env


def relayer(env: ProjectEnv, interp: Interpreter) -> ProjectEnv:
    """The run's environment layered on ``interp`` instead (a toolchain's environment that setup made, like the
    worktree's ``.venv`` after ``uv sync``): what setup installed into it stays; its interpreter, layering and
    console-script twins follow ``interp`` (the old interpreter's are removed: the job's ``tox`` runs as the job
    installed it)."""
    base = os.path.realpath(interp.base)
    (env.root / "pyvenv.cfg").write_text(f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n"
                                         f"version = {interp.version}\n", encoding="utf-8")
    for name in ("python", "python3", f"python{interp.minor}", f"python{env.interp.minor}"):
        link = env.bin / name
        if link.is_symlink():
            link.unlink()
    for name in ("python", "python3", f"python{interp.minor}"):
        (env.bin / name).symlink_to(base)
    moved = ProjectEnv(interp, env.root)
    if moved.site != env.site:
        moved.site.parent.mkdir(parents=True, exist_ok=True)
        env.site.rename(moved.site)
    config = json.loads((moved.site / project_layer.CONFIG).read_text(encoding="utf-8"))
    config.update(sites=list(interp.sites), keep=[interp.prefix, os.path.realpath(interp.prefix)])
    (moved.site / project_layer.CONFIG).write_text(json.dumps(config), encoding="utf-8")
    (moved.site / project_layer.BYTECODE).write_bytes(_bytecode_roots(interp, env.root))
    _drop_twins(env.interp, moved)
    _script_twins(interp, moved)
    return moved


def _bytecode_roots(interp: Interpreter, root: Path) -> bytes:
    """What the start-up hook reads (``project_layer.trust_host_bytecode``): the interpreter's directories
    trusted, the run's directory (beside the environment ``root``) private, and in it the gates' TMPDIR scratch
    (``sandbox.scrubbed_env``'s ``HOME/tmp``, with the scratch home beside the environment)."""
    entries = [b"T" + os.fsencode(d) for d in interp.dirs()] + [b"P" + os.fsencode(root.parent)]
    return b"\0".join([*entries, b"S" + os.fsencode(root.parent / "home" / "tmp")])


def _script_twins(interp: Interpreter, env: ProjectEnv) -> None:
    """Console scripts whose shebang names the project's interpreter, re-pointed at the environment's."""
    for path, twin in _twins(interp, env):
        target = env.bin / path.name
        if target.exists():
            continue
        target.write_bytes(twin)
        target.chmod(0o755)
    for name in ("pip", "pip3"):
        shim = env.bin / name
        if not shim.exists():
            shim.write_text(f'#!/bin/sh\nexec "{env.python}" -m pip "$@"\n', encoding="utf-8")
            shim.chmod(0o755)


def _drop_twins(interp: Interpreter, env: ProjectEnv) -> None:
    """Remove the twins ``_script_twins`` wrote for ``interp`` (a file still exactly as written): layered on
    another interpreter, they would run without the packages they import (the job's ``tox``, ``nox``, ``poetry``),
    where the original script, further down PATH, still runs."""
    for path, twin in _twins(interp, env):
        target = env.bin / path.name
        try:
            if target.is_file() and not target.is_symlink() and target.read_bytes() == twin:
                target.unlink()
        except OSError:
            continue


def _twins(interp: Interpreter, env: ProjectEnv) -> list[tuple[Path, bytes]]:
    """The interpreter's console scripts that get a twin, each with the twin's content."""
    own = {os.path.realpath(p) for p in (interp.executable, interp.base)}
    scripts = Path(interp.scripts)
    entries = sorted(scripts.iterdir()) if scripts.is_dir() else []
    found: list[tuple[Path, bytes]] = []
    for path in entries:
        if path.name.startswith(("python", "activate", "Activate")) or not path.is_file():
            continue
        try:
            with path.open("rb") as handle:
                head = handle.read(MAX_SCRIPT + 1)
        except OSError:
            continue
        if not head.startswith(b"#!") or len(head) > MAX_SCRIPT:
            continue
        first, _, rest = head.partition(b"\n")
        words = first[2:].split()
        if not words or os.path.realpath(os.fsdecode(words[0])) not in own:
            continue
        found.append((path, b"#!" + os.fsencode(env.python) + b"\n" + rest))
    return found
