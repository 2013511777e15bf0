"""Trees the model had in its hands, walked by directory descriptors (``isolation/trees.py``): the worktree's
removal at teardown (``rm -rf``, never following a link out of the tree, read-only directories too, however deep)
and the ageing of what a build wrote."""

from __future__ import annotations

import os
import random
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prime_ci.isolation import hostuid
from prime_ci.isolation.trees import DEPTH, age_written, below, fs_now_ns, remove_tree
from prime_ci.isolation.worktree import Worktree


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """What links inside the tree point at: it must be there, unchanged, after the tree is gone."""
    (tmp_path / "outside" / "dir").mkdir(parents=True)
    (tmp_path / "outside" / "dir" / "keep.txt").write_text("keep")
    (tmp_path / "outside" / "file.txt").write_text("keep")
    return tmp_path / "outside"


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory an unprivileged uid can reach (pytest's own are root's, 0700, when tests run as root)."""
    path = Path(tempfile.mkdtemp(prefix="prime-ci-trees-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_tree(top: Path, outside: Path) -> int:
    """A tree with links out of it; how many entries it holds."""
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f.py").write_text("x")
    (top / "a" / "g.py").write_text("x")
    (top / "a" / "to-dir").symlink_to(outside / "dir")
    (top / "a" / "to-file").symlink_to(outside / "file.txt")
    (top / "to-outside").symlink_to(outside)
    return 7


def make_read_only(top: Path) -> int:
    """Read-only directories (a Go module cache) and one its owner may not even list; how many entries."""
    (top / "ro" / "pkg@v1" / "sub").mkdir(parents=True)
    (top / "ro" / "pkg@v1" / "sub" / "h.go").write_text("x")
    (top / "ro" / "pkg@v1" / "go.mod").write_text("x")
    (top / "locked").mkdir()
    (top / "locked" / "secret").write_text("x")
    for d in (top / "ro" / "pkg@v1" / "sub", top / "ro" / "pkg@v1", top / "ro"):
        d.chmod(0o555)
    (top / "locked").chmod(0)
    return 7


def as_owner(top: Path, action: Callable[[], int]) -> int:
    """``action``'s result, run as the tree's owner: as root, an unprivileged uid the tree and its parent are given
    to first (root may remove what is read-only; its owner must make it writable first)."""
    if os.geteuid() != 0:
        return action()
    uid = hostuid.uid()
    assert uid is not None
    hostuid.give(uid, [top.parent])
    hostuid.give(uid, [top], tree=True)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.write(write, str(action()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        result = pipe.read()
    os.waitpid(pid, 0)
    return int(result or -1)


def test_a_tree_goes_whole_without_following_its_links_out(tmp_path: Path, outside: Path) -> None:
    top = tmp_path / "work"
    entries = make_tree(top, outside)
    assert remove_tree(top) == entries + 1
    assert not top.exists()
    assert (outside / "dir" / "keep.txt").read_text() == "keep" and (outside / "file.txt").read_text() == "keep"


def test_read_only_directories_inside_go_too(scratch: Path) -> None:
    top = scratch / "work"
    entries = make_read_only(top)
    assert as_owner(top, lambda: remove_tree(top)) == entries + 1
    assert not top.exists()


@pytest.mark.parametrize("workers", [1, 8])
def test_a_wide_tree_goes_whole_whatever_the_threads(tmp_path: Path, outside: Path, workers: int) -> None:
    top, entries = tmp_path / "work", 1
    rng = random.Random(38)
    dirs = [top]
    top.mkdir()
    for i in range(1500):  # the top holds more than a batch of files; many directories hold a few, some none
        path = (top if i < 200 else rng.choice(dirs)) / f"e{i}"
        if i % 7 == 0:
            path.mkdir()
            dirs.append(path)
        elif i % 31 == 0:
            path.symlink_to(outside / "dir")
        else:
            path.write_text("x")
        entries += 1
    assert remove_tree(top, workers=workers) == entries
    assert not top.exists() and (outside / "dir" / "keep.txt").exists()


def test_a_link_or_a_file_at_the_top_is_removed_itself(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "link").symlink_to(outside / "dir")
    (tmp_path / "file").write_text("x")
    assert remove_tree(tmp_path / "link") == 1 and remove_tree(tmp_path / "file") == 1
    assert remove_tree(tmp_path / "gone") == 0
    assert (outside / "dir" / "keep.txt").exists() and not (tmp_path / "link").is_symlink()


def test_a_tree_deeper_than_the_directories_held_open_goes_whole(tmp_path: Path) -> None:
    levels = 3 * DEPTH + 5
    path = tmp_path / "deep"
    for level in range(levels):
        path.mkdir()
        (path / "f").write_text("x")
        path = path / f"d{level}"
    assert remove_tree(tmp_path / "deep") == 2 * levels
    assert list(tmp_path.iterdir()) == []


def test_clear_removes_all_but_what_the_artifacts_need(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    entries = make_tree(root / "work", outside)
    (root / "git").mkdir()
    (root / "home" / ".cache").mkdir(parents=True)
    (root / "env").symlink_to(outside)
    wt = Worktree(path=root / "work", git_dir=root / "git", base_commit="", root=root, source="")
    assert wt.clear() == entries + 1 + 2 + 1
    assert sorted(p.name for p in root.iterdir()) == ["git"]
    assert (outside / "dir" / "keep.txt").exists() and (outside / "file.txt").exists()


def test_what_a_build_wrote_is_aged_below_its_start(tmp_path: Path, outside: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "src.c").write_text("source")
    source = (wt / "src.c").stat()
    while (started := fs_now_ns(tmp_path)) <= source.st_ctime_ns:  # the clock's next tick: the build starts
        pass
    (wt / "build" / "lib").mkdir(parents=True)
    (wt / "build" / "lib" / "mod.so").write_text("built")
    (wt / "old.so").write_text("copied, its mtime kept")
    os.utime(wt / "old.so", ns=(5, 7))
    (wt / "link").symlink_to(outside / "file.txt")
    os.utime(outside / "file.txt", ns=(started + 10, started + 10))
    atime = (wt / "build" / "lib" / "mod.so").stat().st_atime_ns
    assert age_written(wt, started, below(started)) == 1
    built = (wt / "build" / "lib" / "mod.so").stat()
    assert built.st_mtime_ns == below(started) == (started // 10**9 - 1) * 10**9 and built.st_atime_ns == atime
    assert started // 10**9 > built.st_mtime_ns // 10**9, "an edit in the second the build started is newer"
    assert (wt / "src.c").stat().st_mtime_ns == source.st_mtime_ns, "not written by the build"
    assert (wt / "old.so").stat().st_mtime_ns == 7, "already older: never made newer"
    assert (outside / "file.txt").stat().st_mtime_ns == started + 10, "a link is not followed"
    assert stat.S_ISLNK((wt / "link").lstat().st_mode)
