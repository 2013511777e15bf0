"""The entry tree of a session: which entries are on the active branch, which are off it.

Entries link to their parent through ``parentId`` (Prime Agent's ``/tree`` and branch summaries start a new
branch from an earlier entry in the same file). The active leaf is the last entry of the file, as Prime Agent
takes it when it opens a session; the active branch is the leaf and its ancestors, root first.

Files that are not a clean tree still give one branch: an entry without an ``id`` (or without a ``parentId``
member) follows the entry before it, as Prime Agent's migration of version-1 files links them, and so does an
entry whose ``parentId`` names no entry in the file (its parent was lost to damage or salvage): the display
keeps the whole run rather than cutting it at the gap. A ``parentId`` cycle ends the walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Branches:
    """Indices into the entry list."""

    path: list[int]  # the active branch, root first
    off_branch: list[int]  # every other entry, in file order
    forks: dict[int, int] = field(default_factory=dict)  # path index -> how many off-branch entries descend there
    relinked: list[int] = field(default_factory=list)  # entries whose parentId names no entry (linked to previous)


def _parents(entries: Sequence[dict[str, Any]]) -> tuple[list[int | None], list[int]]:
    by_id: dict[str, int] = {}
    for i, entry in enumerate(entries):
        eid = entry.get("id")
        if isinstance(eid, str):
            by_id[eid] = i  # a repeated id names its last entry, as in Prime Agent's index
    parents: list[int | None] = []
    relinked: list[int] = []
    for i, entry in enumerate(entries):
        previous = i - 1 if i else None
        if not isinstance(entry.get("id"), str) or "parentId" not in entry:
            parents.append(previous)
            continue
        parent = entry["parentId"]
        if parent is None:
            parents.append(None)
        elif isinstance(parent, str) and parent in by_id and by_id[parent] != i:
            parents.append(by_id[parent])
        else:
            relinked.append(i)
            parents.append(previous)
    return parents, relinked


def branches(entries: Sequence[dict[str, Any]]) -> Branches:
    """The active branch (leaf = last entry) and the entries off it."""
    parents, relinked = _parents(entries)
    path: list[int] = []
    on_path: set[int] = set()
    node = len(entries) - 1 if entries else None
    while node is not None and node not in on_path:
        path.append(node)
        on_path.add(node)
        node = parents[node]
    path.reverse()
    off = [i for i in range(len(entries)) if i not in on_path]
    anchor: dict[int, int | None] = {}  # off-branch entry -> its nearest ancestor on the path
    forks: dict[int, int] = {}
    for i in off:  # every entry is walked once: a walk stops at the first entry an earlier walk anchored
        chain: list[int] = []
        seen: set[int] = set()  # the chain's entries, for a cycle check that does not walk the chain again
        node = i
        while node is not None and node not in on_path and node not in anchor and node not in seen:
            chain.append(node)
            seen.add(node)
            node = parents[node]
        found = anchor.get(node) if node is not None and node in anchor else (node if node in on_path else None)
        for n in chain:
            anchor[n] = found
        if found is not None:  # else detached: no ancestor on the active branch
            forks[found] = forks.get(found, 0) + 1
    return Branches(path, off, forks, relinked)
