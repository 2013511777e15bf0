"""A bridge's socket directory fits a unix socket's 107-byte path even under a deep ``TMPDIR`` (a CI workspace
or pytest's own temp tree), and a killed run's directories are still found there to be swept."""

from __future__ import annotations

import asyncio
import socket
import tempfile
from pathlib import Path

import pytest

from prime_ci.kernel import bridge


def _connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        return True


def test_a_deep_temp_directory_still_gets_a_bridge_and_the_sweep_finds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 40)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    directory = bridge.run_dir("run-marker-1")
    served = bridge.Bridge(directory)

    async def start_and_connect() -> bool:
        await served.start()
        try:
            return await asyncio.to_thread(_connects, served.path)
        finally:
            await served.close()

    leftover = bridge.run_dir("run-marker-1")
    assert asyncio.run(start_and_connect())
    assert leftover.exists()
    assert bridge.remove_run_dirs("run-marker-1") == 1
    assert not leftover.exists()


def test_a_short_temp_directory_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    short = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        made = bridge.run_dir("run-marker-2")
        assert made.parent == short
        assert bridge.remove_run_dirs("run-marker-2") == 1
    finally:
        short.rmdir()
