"""Run as a script in the project's interpreter by the ``build-requires`` setup step (standard library only): the
build backend's own requirements for building a wheel or an editable (PEP 517 ``get_requires_for_build_wheel`` and
``get_requires_for_build_editable``), which an isolated build installs and an offline ``--build`` with
``pip install --no-build-isolation`` needs already there: ``wheel`` for setuptools older than 70.1 (what a Python
3.11 venv carries: "invalid command 'bdist_wheel'" without it), ``setup.py``'s ``setup_requires``, what a backend
adds for its configuration. They come from the repository under review, so only plain requirement specifiers are
installed; a hook that fails is said and skipped (the build says the rest).

    python build_hooks.py [--list] BACKEND [BACKEND_PATH ...]
    python build_hooks.py --wheelhouse DIR BACKEND [BACKEND_PATH ...] -- REQUIREMENT ...

``--list`` prints them, one a line, instead of installing them. ``--wheelhouse`` downloads the REQUIREMENTs
([build-system].requires) and then the backend's own into DIR, for an isolated build that runs offline with DIR as
its find-links (the ``wheelhouse`` setup step): the backend's hooks are read with the REQUIREMENTs installed in a
scratch directory, not in the project's environment.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

# name[extras] (version specifiers) (; marker): PEP 508 without direct references (``toolchains`` reads
# [build-system].requires with the same rule)
SPECIFIER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._, -]*\])?"
                       r"(?:\s*(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+(?:\s*,\s*(?:===|==|!=|~=|<=|>=|<|>)"
                       r"\s*[A-Za-z0-9.*+!_-]+)*)?(?:\s*;\s*[A-Za-z0-9_.<>=!~'\" ()-]+)?$")
HOOKS = ("get_requires_for_build_wheel", "get_requires_for_build_editable")


def requirements(spec: str, paths: list[str]) -> list[str]:
    """What the backend ``spec`` (``module:object``) asks for, besides [build-system].requires."""
    sys.path[:0] = paths
    module, _, attribute = spec.partition(":")
    backend: Any = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        backend = getattr(backend, part)
    wanted: set[str] = set()
    for hook in HOOKS:
        if callable(getattr(backend, hook, None)):
            wanted.update(getattr(backend, hook)(None))
    return sorted(r.strip() for r in wanted if isinstance(r, str) and SPECIFIER.match(r.strip()))


def wheelhouse(directory: str, backend: list[str], requires: list[str]) -> int:
    """Download ``requires`` and what ``backend`` (its name and paths) asks for besides into ``directory``."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    code = subprocess.call([*pip, "download", "--dest", directory, *requires])
    if code:
        return code
    with tempfile.TemporaryDirectory(prefix="build-requires-") as scratch:
        code = subprocess.call([*pip, "install", "--no-index", "--find-links", directory, "--target", scratch,
                                *requires])
        if code:
            return code
        path = os.pathsep.join(filter(None, [scratch, os.environ.get("PYTHONPATH")]))
        listed = subprocess.run([sys.executable, __file__, "--list", *backend], capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": path}, check=False)
    sys.stderr.write(listed.stderr)
    extra = [r for r in listed.stdout.splitlines() if r and SPECIFIER.match(r)]
    if not extra:
        return 0
    print(f"wheelhouse: the build backend also needs {', '.join(extra)}")
    return subprocess.call([*pip, "download", "--dest", directory, *extra])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--wheelhouse"] and "--" in argv:
        split = argv.index("--")
        return wheelhouse(argv[1], argv[2:split], argv[split + 1:])
    listing = argv[:1] == ["--list"]
    args = argv[1:] if listing else argv
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what the backend prints is not a requirement
            found = requirements(args[0], args[1:])
    except Exception as exc:  # noqa: BLE001 - the backend's own code (setup.py) failed: the build says how
        print(f"build-requires: the build backend's requirements were not read: {exc!r}", file=sys.stderr)
        return 0
    if listing or not found:
        print("\n".join(found))
        return 0
    print(f"build-requires: the build backend also needs {', '.join(found)}")
    return subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            *found])


if __name__ == "__main__":
    del sys.path[0]  # this file's directory: prime-ci's own modules must not shadow what the backend imports
    sys.exit(main(sys.argv[1:]))
