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

import os
import sys

TYPE_CHECKING = False  # not typing's: nothing more may be imported before the bytecode hook is in place
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

CONFIG = "_prime_ci_layer.json"
# NUL-separated entries, "T" or "P" and a path: read before anything is imported (json and re compiled again in
# every gate process cost ~80 ms of start-up)
BYTECODE = "_prime_ci_bytecode"
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


def trust_host_bytecode(trusted: list[str], private: list[str], scratch: list[str] | None = None) -> None:
    """Point the bytecode cache of sources under a ``trusted`` root (and in no ``private`` one) back at their own
    ``__pycache__`` while a pycache prefix is set, for the interpreter's loaders and for pytest's assertion
    rewriter (which rewrites whole plugin distributions in every process); every other source keeps the prefix.
    So do sources under a ``scratch`` root, the gates' TMPDIR: what is there the run's processes wrote, and no
    source the verdict reads (the patch, a compared environment), so bytecode beside one stands in for nothing,
    while a test that installs or compiles into its tmp_path finds the ``.pyc`` where it put it (pypa/installer's
    test_main)."""
    # the loaders look the function up in this module at each call
    import importlib._bootstrap_external as external

    prefixed = getattr(external, "cache_from_source", None)
    if prefixed is None:  # a Python whose loaders work otherwise: every source keeps the prefix (slower, safe)
        return
    private_roots = [os.path.realpath(p) for p in private]
    # a root holding the run's directory (an interpreter whose prefix is / or /tmp) would hold whatever else the
    # run can write beside it too, and a root inside it is the run's: neither is trusted at all, so a source under
    # a trusted root is never the run's
    trusted_roots = tuple(t for t in (os.path.realpath(t) for t in trusted)
                          if not any(_under(p, t) or _under(t, p) for p in private_roots))
    scratch_roots = tuple(os.path.realpath(d) for d in scratch or [])

    def beside(path: str) -> str | None:
        """The ``__pycache__`` beside ``path`` if a prefix is set and ``path`` really lies under a trusted root."""
        if not sys.pycache_prefix:
            return None
        # the real path: a symlink (or a ``..``) must not borrow a trusted directory's name for another file
        real = os.path.realpath(path)
        return os.path.join(os.path.dirname(real), "__pycache__") \
            if any(_under(real, t) for t in (*trusted_roots, *scratch_roots)) else None

    def cache_from_source(path: str, debug_override: object = None, *, optimization: object = None) -> str:
        cached: str = prefixed(path, debug_override, optimization=optimization)
        own = beside(path)
        return cached if own is None else os.path.join(own, os.path.basename(cached))

    def trust_rewriter(rewrite: ModuleType) -> None:
        prefixed_dir = getattr(rewrite, "get_cache_dir", None)
        if prefixed_dir is None:  # a pytest that finds its cache otherwise: the prefix stays
            return

        def get_cache_dir(file_path: Any) -> Any:
            own = beside(str(file_path))
            return prefixed_dir(file_path) if own is None else type(file_path)(own)

        rewrite.__dict__["get_cache_dir"] = get_cache_dir

    external.cache_from_source = cache_from_source  # type: ignore[assignment]  # typeshed overloads one signature
    if trusted_roots or scratch_roots:
        sys.meta_path.insert(0, _AfterImport("_pytest.assertion.rewrite", trust_rewriter))


class _AfterImport:
    """A ``sys.meta_path`` entry that finds nothing itself: once ``name`` is imported (found by the other finders)
    it calls ``then`` on the module, then leaves."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = next((s for f in sys.meta_path if hasattr(f, "find_spec")
                     for s in [f.find_spec(fullname, path, target)] if s is not None), None)
        loader = spec.loader if spec is not None else None
        run = getattr(loader, "exec_module", None)
        if spec is None or run is None:
            return spec
        then = self.then

        def exec_module(module: ModuleType) -> None:
            run(module)
            then(module)

        if hasattr(loader, "__dict__"):  # else a loader that takes no attributes: the module is left as it is
            loader.exec_module = exec_module  # type: ignore[method-assign,union-attr]
        return spec


def _trust(here: str) -> None:
    try:
        with open(os.path.join(here, BYTECODE), "rb") as handle:
            entries = [os.fsdecode(e) for e in handle.read().split(b"\0") if e]
    except FileNotFoundError:  # an environment an older prime-ci made (a resumed run): nothing trusted
        entries = []
    trust_host_bytecode(*([e[1:] for e in entries if e[0] == kind] for kind in "TPS"))


def hook() -> None:
    """The ``.pth`` line's call: apply once, then on every later processing re-append what was added."""
    if _applied:
        sys.path.extend(_added)
        return
    _applied.append(True)
    here = os.path.dirname(os.path.abspath(__file__))
    _trust(here)
    before = len(sys.path)
    apply(here)
    _added[:] = [p for p in sys.path[before:] if isinstance(p, str)]


def apply(config_dir: str) -> None:
    import json
    import site

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


def bytecode_hook() -> None:
    """The ``.pth`` line's call in an environment a tool made (``install``): the bytecode rule alone, once."""
    if not _applied:
        _applied.append(True)
        _trust(os.path.dirname(os.path.abspath(__file__)))


BYTECODE_PTH = "_prime_ci_bytecode.pth"
TOOL_ENVS = (".venv", ".nox/*", ".tox/*")  # where tools make a project's environments in the worktree


def install(run_root: str, envs: list[str]) -> list[str]:
    """Give the virtual environments ``envs`` (made by the project's tools in setup: nox's, tox's, uv's ``.venv``,
    poetry's; the gates run their interpreters directly, not layered on the run's) this module with the run's
    bytecode rule: sources in the run's directory ``run_root`` compile under the gates' pycache prefix, those in
    the gates' TMPDIR beside themselves. Run in the sandbox by the ``bytecode`` setup step; returns the site
    directories given it."""
    done: list[str] = []
    roots = b"\0".join([b"P" + os.fsencode(run_root), b"S" + os.fsencode(os.path.join(run_root, "home", "tmp"))])
    for env in envs:
        if not os.path.isfile(os.path.join(env, "pyvenv.cfg")) or os.path.islink(env):
            continue
        lib = os.path.join(env, "lib")
        for name in sorted(os.listdir(lib)) if os.path.isdir(lib) and not os.path.islink(lib) else []:
            site = os.path.join(lib, name, "site-packages")
            if not name.startswith("python") or os.path.islink(site) or not os.path.isdir(site):
                continue
            with open(os.path.abspath(__file__), "rb") as source:
                _write(os.path.join(site, "_prime_ci_layer.py"), source.read())
            _write(os.path.join(site, BYTECODE), roots)
            _write(os.path.join(site, BYTECODE_PTH), b"import _prime_ci_layer; _prime_ci_layer.bytecode_hook()\n")
            done.append(site)
    return done


def _write(path: str, data: bytes) -> None:
    if os.path.islink(path):
        os.unlink(path)
    with open(path, "wb") as handle:
        handle.write(data)


if __name__ == "__main__":  # python project_layer.py RUN_ROOT ENV...: the ``bytecode`` setup step
    del sys.path[0]  # this file's directory: prime-ci's own modules must not shadow the standard library's
    import glob

    found = [e for pattern in sys.argv[2:] for e in sorted(glob.glob(pattern))]
    for given in install(sys.argv[1], found):
        print(f"bytecode: the run's pycache rule in {given}")
