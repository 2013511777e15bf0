"""What the gates import from outside the worktree: nothing there may change what they decide unless a file in the
patch explains it (DESIGN §14, verdict integrity).

The run's environment (``--build`` may write it: ``pip install --no-build-isolation -e .``) and, without the
sandbox, the startup files of the project interpreter's own site directories are taken as they are before the
model's first cell (after setup and the first build), then compared after every build step, before every gate
round. A change is explained when it is:

- bytecode, or package metadata other than ``entry_points.txt`` (which loads pytest plugins);
- a ``.pth`` file whose lines are only directories inside the worktree (an editable install's path entry);
- a byte-for-byte copy of a worktree file at the same package path (a ``pip install .`` of the project);
- content equal to what was there before the model's first cell (a rebuild writing the same files);
- or the project reinstalled at another version: a file named and written as one that was there before, but for
  the version (setuptools-scm's ``0.1.dev2`` becomes ``0.1.dev2+dirty`` once the model changed the tree, so an
  editable reinstall renames its ``.pth``, finder and dist-info), and the file it replaces.

Anything else — a new ``.pth`` with an ``import`` line, ``sitecustomize``/``usercustomize``, a module that shadows
one, an edited console script, a removed file — is named, and the run ends in a security stop (exit 7).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.isolation.projenv import ProjectEnv

Signature = tuple[str, int, str]  # kind (f, l, d), size, digest of the content or the link's target
STARTUP = ("sitecustomize.py", "usercustomize.py")
METADATA = (".dist-info", ".egg-info")
MAX_HASHED = 64 * 1024 * 1024  # a larger file is compared by size and modification time alone


@dataclass
class Outside:
    """The places outside the worktree that the gates load code from, and what changed there unexplained."""

    worktree: Path
    trees: list[Path] = field(default_factory=list)  # compared whole (the run's environment)
    sites: list[Path] = field(default_factory=list)  # only their startup files (.pth, sitecustomize)
    baseline: dict[str, Signature] | None = None
    found: dict[str, str] = field(default_factory=dict)  # path -> why it is not explained (first seen)

    @classmethod
    def of_run(cls, worktree: Path, project: ProjectEnv, *, sandboxed: bool) -> Outside:
        """The run's environment; without the sandbox, a cell may also write the interpreter's startup files."""
        return cls(worktree, [project.root], [] if sandboxed else [Path(site) for site in project.interp.sites])

    def start(self) -> None:
        self.baseline = self.scan()

    def check(self) -> list[str]:
        """Record what changed since ``start`` that no worktree file explains; every finding so far, described."""
        if self.baseline is None:
            return []
        now = self.scan()
        moves = _version_moves(self.baseline, now)
        for path in sorted(set(now) | set(self.baseline)):
            before, after = self.baseline.get(path), now.get(path)
            if before == after or path in self.found or self._moved(path, now, moves):
                continue
            why = self._unexplained(Path(path), before, after)
            if why is not None:
                self.found[path] = why
        return self.findings()

    def _moved(self, path: str, now: dict[str, Signature], moves: list[tuple[str, str, str]]) -> bool:
        """``path`` is one side of a reinstall at another version: removed, with its renamed twin there now; or
        created, as the byte-for-byte rename (versions swapped back) of a file that was there and is gone."""
        assert self.baseline is not None
        for site, old, new in moves:
            if not path.startswith(site + os.sep):
                continue
            rel = path[len(site) + 1:]
            if path in self.baseline and path not in now:  # the old version's file: its successor is judged
                if os.path.join(site, _swap(rel, old, new)) in now:
                    return True
            elif path in now and path not in self.baseline and now[path][0] == "f":
                was = os.path.join(site, _swap(rel, new, old))
                if was in self.baseline and was not in now and self.baseline[was][0] == "f":
                    try:
                        content = _swap(Path(path).read_bytes().decode("utf-8", "surrogateescape"), new, old)
                    except OSError:
                        return False
                    data = content.encode("utf-8", "surrogateescape")
                    if self.baseline[was][1:] == (len(data), hashlib.sha256(data).hexdigest()):
                        return True
        return False

    def findings(self) -> list[str]:
        return [f"{path} ({why})" for path, why in self.found.items()]

    def scan(self) -> dict[str, Signature]:
        seen: dict[str, Signature] = {}
        for tree in self.trees:
            for path in _walk(tree):
                seen[str(path)] = _signature(path)
        for site in self.sites:
            for path in _startup_files(site):
                seen[str(path)] = _signature(path)
        return seen

    def _unexplained(self, path: Path, before: Signature | None, after: Signature | None) -> str | None:
        parts = path.parts
        if "__pycache__" in parts or path.suffix == ".pyc":
            return None
        if any(p.endswith(METADATA) for p in parts[:-1]) and path.name != "entry_points.txt":
            return None
        if after is None:
            return "removed outside the worktree"
        if path.suffix == ".pth" and after[0] == "f" and self._paths_only(path):
            return None
        if after[0] == "f" and self._copy_of_worktree_file(path):
            return None
        if path.name in STARTUP or path.suffix == ".pth":
            return "code that runs at every interpreter start, outside the worktree"
        if path.name == "entry_points.txt":
            return "entry points (pytest plugins, console scripts) changed outside the worktree"
        return ("changed" if before is not None else "created") + " outside the worktree, by no file in the patch"

    def _paths_only(self, pth: Path) -> bool:
        """An editable install's path entry: every line a directory inside the worktree."""
        root = os.path.realpath(self.worktree)
        try:
            lines = pth.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return False
        entries = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        return all(not e.startswith(("import ", "import\t")) and os.path.isdir(e)
                   and (os.path.realpath(e) + "/").startswith(root + "/") for e in entries)

    def _copy_of_worktree_file(self, path: Path) -> bool:
        """A file installed from the project: the same bytes at the same package path in the worktree."""
        site = next((p for p in path.parents if p.name in ("site-packages", "dist-packages")), None)
        if site is None:
            return False
        rel = path.relative_to(site)
        digest = _signature(path)
        for top in (self.worktree, self.worktree / "src", self.worktree / "lib"):
            candidate = top / rel
            if candidate.is_file() and not candidate.is_symlink() and _signature(candidate) == digest:
                return True
        return False


def _version_moves(before: dict[str, Signature], now: dict[str, Signature]) -> list[tuple[str, str, str]]:
    """(site, old, new): a distribution whose ``NAME-VERSION.dist-info`` in a site directory went between the two
    scans and came back under another version."""
    def dists(paths: dict[str, Signature]) -> set[tuple[str, str, str]]:
        found = set()
        for path in paths:
            parent = Path(path).parent
            if parent.name.endswith(".dist-info") and "-" in parent.name:
                name, _, version = parent.name[: -len(".dist-info")].partition("-")
                found.add((str(parent.parent), name, version))
        return found

    gone, came = dists(before) - dists(now), dists(now) - dists(before)
    return [(site, old, new) for site, name, old in gone for site2, name2, new in came
            if (site, name) == (site2, name2) and old != new]


def _swap(text: str, old: str, new: str) -> str:
    """``text`` with version ``old`` written as ``new``, as is and in the form names take (``0_1_dev2``)."""
    safe_old, safe_new = (re.sub(r"\W", "_", v) for v in (old, new))
    return text.replace(old, new).replace(safe_old, safe_new) if safe_old != old else text.replace(old, new)


def _walk(tree: Path) -> Iterator[Path]:
    if not tree.is_dir():
        return
    for top, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(top, d)))]:
            yield Path(top) / name


def _startup_files(site: Path) -> Iterator[Path]:
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return
    for name in names:
        if name.endswith(".pth") or name in STARTUP:
            yield site / name


def _signature(path: Path) -> Signature:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return ("l", 0, os.readlink(path))
    if not stat.S_ISREG(info.st_mode):
        return ("d", 0, "")
    if info.st_size > MAX_HASHED:
        return ("f", info.st_size, f"mtime {info.st_mtime_ns}")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return ("f", info.st_size, digest.hexdigest())
