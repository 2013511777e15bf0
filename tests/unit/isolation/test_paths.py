"""The one containment rule (``isolation/paths.py``): symlinks out, ``..``, absolute paths, prefix siblings."""

from __future__ import annotations

from pathlib import Path, PurePath

import pytest

from prime_ci.isolation.paths import inside, inside_any, relative_inside, relative_name


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``root`` with a file, a subdirectory, links in and out, and a sibling ``root-x`` sharing its prefix."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "f.txt").write_text("in")
    (tmp_path / "root-x").mkdir()
    (tmp_path / "root-x" / "secret").write_text("out")
    (tmp_path / "outside.txt").write_text("out")
    (root / "link-out").symlink_to(tmp_path / "outside.txt")
    (root / "dir-out").symlink_to(tmp_path)
    (root / "link-in").symlink_to(root / "f.txt")
    (root / "sub" / "up").symlink_to("..")  # resolves to root itself
    (root / "loop-a").symlink_to("loop-b")
    (root / "loop-b").symlink_to("loop-a")
    return root


@pytest.mark.parametrize("resolve", [True, False])
@pytest.mark.parametrize("name", ["f.txt", "sub", "sub/new-file", ".", "./f.txt"])
def test_plain_names_in_the_root_are_inside(tree: Path, name: str, resolve: bool) -> None:
    assert inside(tree, name, resolve=resolve)
    assert inside(tree, tree / name, resolve=resolve)


@pytest.mark.parametrize("resolve", [True, False])
def test_a_prefix_sibling_is_outside(tree: Path, resolve: bool) -> None:
    sibling = tree.parent / "root-x" / "secret"
    assert not inside(tree, sibling, resolve=resolve)
    assert not inside(str(tree), str(sibling), resolve=resolve)
    assert not inside("/sys/fs/cgroup", "/sys/fs/cgroup-x", resolve=False)


@pytest.mark.parametrize("resolve", [True, False])
def test_an_absolute_path_elsewhere_is_outside(tree: Path, resolve: bool) -> None:
    assert not inside(tree, "/etc/passwd", resolve=resolve)
    assert not inside(tree, tree.parent / "outside.txt", resolve=resolve)


@pytest.mark.parametrize("name", ["link-out", "dir-out/outside.txt", "dir-out/root-x/secret", "sub/up/link-out"])
def test_resolved_a_symlink_out_of_the_root_is_outside(tree: Path, name: str) -> None:
    assert (tree / name).exists()
    assert not inside(tree, name, resolve=True)
    assert inside(tree, name, resolve=False)  # as written it names a place in the root: lexical does not look


def test_resolved_a_symlink_within_the_root_is_inside(tree: Path) -> None:
    assert inside(tree, "link-in", resolve=True)
    assert inside(tree, "sub/up/f.txt", resolve=True)


@pytest.mark.parametrize("name", ["..", "../root-x/secret", "sub/../../outside.txt", "../root/f.txt/../.."])
def test_dotdot_climbing_out_is_outside_in_both_modes(tree: Path, name: str) -> None:
    assert not inside(tree, name, resolve=True)
    assert not inside(tree, name, resolve=False)


def test_dotdot_is_applied_after_the_link_it_follows(tree: Path) -> None:
    """``dir-out/..`` is the parent of where the link leads (outside), not ``root`` as the text suggests."""
    (tree.parent / "outside-dir").mkdir()
    (tree / "sub" / "deep").symlink_to(tree.parent / "outside-dir")
    assert not inside(tree, "sub/deep/../f.txt", resolve=True)
    assert not inside(tree, "sub/deep/../f.txt", resolve=False)


def test_lexically_any_dotdot_is_outside_even_if_it_stays_in(tree: Path) -> None:
    assert inside(tree, "sub/../f.txt", resolve=True)
    assert not inside(tree, "sub/../f.txt", resolve=False)
    assert not inside(tree, tree / "sub" / ".." / "f.txt", resolve=False)


def test_a_symlink_loop_is_outside_not_an_error(tree: Path) -> None:
    assert not inside(tree, "loop-a/x", resolve=True)


def test_a_root_reached_through_a_symlink_contains_its_real_files(tree: Path) -> None:
    alias = tree.parent / "alias"
    alias.symlink_to(tree)
    assert inside(alias, tree / "f.txt", resolve=True)
    assert inside(tree, alias / "f.txt", resolve=True)


def test_inside_any(tree: Path) -> None:
    roots = [tree / "sub", tree.parent / "root-x"]
    assert inside_any(roots, tree.parent / "root-x" / "secret", resolve=True)
    assert not inside_any(roots, tree / "f.txt", resolve=True)
    assert not inside_any([], tree, resolve=False)


@pytest.mark.parametrize(("name", "ok"), [
    ("a", True), ("a/b.py", True), ("./a", True), ("a/./b", True), (".hidden", True), ("a..b", True),
    ("", False), ("/a", False), ("..", False), ("a/..", False), ("a/../b", False), ("../a", False),
])
def test_relative_name(name: str, ok: bool) -> None:
    assert relative_name(name) is ok


def test_relative_inside() -> None:
    assert relative_inside("/repo", "/repo/pkg/test_x.py") == PurePath("pkg/test_x.py")
    assert relative_inside("/repo", "/repo") == PurePath(".")
    assert relative_inside("/", "/a/b") == PurePath("a/b")
    assert relative_inside("/repo", "/repo-x/test_x.py") is None
    assert relative_inside("/repo", "/repo/../etc/passwd") is None
    assert relative_inside("/repo", "/elsewhere") is None
