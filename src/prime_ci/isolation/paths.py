"""Path containment: the one rule for "does this path lie in that root" (the root itself included).

A relative path is taken relative to the root; roots and paths are compared component by component, so
``/root-x`` is not in ``/root``. The caller picks the mode by what it does with the answer:

- ``resolve=True`` (the host is about to read, trust or mount what is on disk there): both sides are resolved
  as the kernel would open them (every symlink followed, each ``..`` applied after the link before it). A
  symlink that leads out of the root, a ``..`` that climbs out, or a symlink loop is outside.
- ``resolve=False`` (a name: a path in a report, a cgroup, a setting checked before its tree exists, a path
  already resolved): compared as written, and any ``..`` component is outside, since what it climbs to
  depends on symlinks the name does not show.

Not routed here: ``project_layer.py`` (runs in the project's interpreter, standard library only: its own
prefix test) and the sandbox's deny-lists of system directories (``sandbox.py``), where a name that
cannot be judged as written must count as inside, the opposite of this rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePath


def inside(root: str | PurePath, path: str | PurePath, *, resolve: bool) -> bool:
    """Whether ``path`` lies in ``root`` (see the module's docstring for the two modes)."""
    if not resolve:
        whole = PurePath(root, path)
        return whole.is_relative_to(root) and ".." not in whole.relative_to(root).parts
    try:
        return Path(root, path).resolve().is_relative_to(Path(root).resolve())
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13), an unreadable link
        return False


def inside_any(roots: Iterable[str | PurePath], path: str | PurePath, *, resolve: bool) -> bool:
    return any(inside(root, path, resolve=resolve) for root in roots)


def relative_name(name: str) -> bool:
    """Whether ``name`` is a relative path that stays under any directory it is joined to, as written: not
    empty, not absolute, no ``..`` component. For names checked before there is a root to resolve against."""
    rel = PurePath(name)
    return bool(name) and not rel.is_absolute() and ".." not in rel.parts


def relative_inside(root: str | PurePath, path: str | PurePath) -> PurePath | None:
    """``path`` relative to ``root`` when it lies in it as written (``resolve=False``), else None."""
    if not inside(root, path, resolve=False):
        return None
    return PurePath(root, path).relative_to(PurePath(root))

