"""Runs at start-up of every Python that uses a run's project environment (copied there as ``_prime_ci_layer``).

Stdlib only, no prime-ci imports: it is executed by the project's interpreter, which need not have prime-ci.
It adds the project interpreter's package directories after the environment's own (processing their ``.pth``
files, so editable installs made in the job stay active) and then points everything that referred to the
original checkout at the worktree: ``sys.path`` entries and setuptools' editable finders (``MAPPING`` and
``NAMESPACES`` of the ``__editable___*_finder`` modules).

Its ``.pth`` line calls ``hook`` each time ``site`` processes the environment's site-packages. pip's isolated
build environment learns what "the interpreter's own packages" are by processing that directory again with a
fresh set of known paths and strips whatever that appends from ``sys.path``: so on every later call ``hook``
appends the entries it added, and the isolated build sees only its own requirements, as it would with the
interpreter itself (a build needing ``setuptools>=77`` must not import the job's older copy).
"""

from __future__ import annotations

import json
import os
import site
import sys

CONFIG = "_prime_ci_layer.json"
_added: list[str] = []  # the sys.path entries the first apply() added
_applied: list[bool] = []


def _under(path: str, root: str) -> bool:
    # paths.inside(..., resolve=False) without the import: this file runs in the project's interpreter
    return path == root or path.startswith(root + os.sep)


def swap(path: str, src: str, dst: str, keep: tuple[str, ...] = ()) -> str:
    """``path`` under ``src`` moved under ``dst``; paths under a ``keep`` root (the job's own virtualenv inside
    the checkout, which the clone does not have) stay where they are."""
    if _under(path, src) and not any(_under(path, k) for k in keep):
        return dst + path[len(src):]
    return path


def redirect(src: str, dst: str, keep: tuple[str, ...] = ()) -> None:
    """Rewrite every import location under ``src`` (the job's checkout) to the same place under ``dst``."""
    sys.path[:] = [swap(p, src, dst, keep) if isinstance(p, str) else p for p in sys.path]
    sys.path_importer_cache.clear()
    for name, module in list(sys.modules.items()):
        if not (name.startswith("__editable__") and name.endswith("_finder")):
            continue
        mapping = getattr(module, "MAPPING", None)
        if isinstance(mapping, dict):
            for key, value in list(mapping.items()):
                if isinstance(value, str):
                    mapping[key] = swap(value, src, dst, keep)
        namespaces = getattr(module, "NAMESPACES", None)
        if isinstance(namespaces, dict):
            for key, value in list(namespaces.items()):
                if isinstance(value, list):
                    namespaces[key] = [swap(v, src, dst, keep) if isinstance(v, str) else v for v in value]


def hook() -> None:
    """The ``.pth`` line's call: apply once, then on every later processing re-append what was added."""
    if _applied:
        sys.path.extend(_added)
        return
    _applied.append(True)
    before = len(sys.path)
    apply(os.path.dirname(os.path.abspath(__file__)))
    _added[:] = [p for p in sys.path[before:] if isinstance(p, str)]


def apply(config_dir: str) -> None:
    with open(os.path.join(config_dir, CONFIG), encoding="utf-8") as handle:
        config = json.load(handle)
    known = set(sys.path)
    for directory in config.get("sites", []):
        if directory not in known and os.path.isdir(directory):
            site.addsitedir(directory)
    pair = config.get("redirect")
    if pair:
        keep = tuple(config.get("keep", []))
        redirect(pair[0], pair[1], keep)
        _redirected_pth_paths(config.get("sites", []), pair[0], pair[1], keep)


def _redirected_pth_paths(sites: list[str], src: str, dst: str, keep: tuple[str, ...]) -> None:
    """Path lines of ``.pth`` files that name the job's checkout: ``site`` skips a line whose directory does
    not exist (the checkout is hidden in the sandbox), so add its worktree twin here."""
    for directory in sites:
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                line = line.strip()
                if not line or line.startswith(("#", "import ", "import\t")):
                    continue
                twin = swap(os.path.normpath(os.path.join(directory, line)), src, dst, keep)
                if twin.startswith(dst) and twin not in sys.path and os.path.isdir(twin):
                    sys.path.append(twin)
