"""Bytecode the gates may not reuse: the worktree's, in the gates' cache outside it.

Gates write bytecode under ``PYTHONPYCACHEPREFIX`` (outside the worktree, so a planted ``__pycache__`` cannot
stand in for a source). Python and pytest's assertion rewriter take a cached module as current when the
source's mtime, cut to the whole second, and its size match what they recorded: a fix of the same length
written in the second the last round imported the module (a replayed or fast model does that) would be tested
as the code before it, and a cell could set a source's mtime back on purpose. So every round starts without
the worktree's bytecode; the interpreter's and the environment's stay cached."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from prime_ci.isolation.trees import remove_tree

PREFIX_VAR = "PYTHONPYCACHEPREFIX"


def mirror(prefix: Path, tree: Path) -> Path:
    """Where the interpreter caches bytecode of the sources under ``tree`` (as ``sys.pycache_prefix`` mirrors
    a source's absolute directory, the real path: a gate's working directory has its links resolved)."""
    real = Path(os.path.realpath(tree))
    return prefix / real.relative_to(real.anchor)


def drop_tree_bytecode(env: Mapping[str, str], tree: Path) -> int:
    """Remove the cached bytecode of ``tree``'s sources from the gates' cache; how many entries went."""
    prefix = env.get(PREFIX_VAR)
    if not prefix:
        return 0
    return remove_tree(mirror(Path(prefix), tree), workers=2)
