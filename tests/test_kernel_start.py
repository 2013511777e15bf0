"""Kernel start-up: prime-ci's own launcher and readiness handshake (no jupyter_client wait_for_ready)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prime_ci.errors import KernelLost
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.kernel.client import Kernel, KernelConfig
from prime_ci.loop.budget import Budget, Limits


def _config(cwd: Path, run_dir: Path, **kw: object) -> KernelConfig:
    return KernelConfig(cwd=cwd, env={"PATH": os.environ["PATH"], "HOME": str(cwd)}, run_dir=run_dir,  # type: ignore[arg-type]
                        limits=BoxLimits(), **kw)


def test_worktree_modules_cannot_hijack_start_but_are_importable_after(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for shadow in ("zmq", "traitlets", "IPython", "debugpy"):
        (work / f"{shadow}.py").write_text(f"raise SystemExit('hijacked by the worktree: {shadow}')\n")
    (work / "mymod.py").write_text("VALUE = 42\n")

    async def scenario() -> tuple[str, str]:
        kernel = Kernel(_config(work, tmp_path / "run"))
        await kernel.start(timeout=60)
        try:
            mine = await kernel.execute("import mymod\nprint(mymod.VALUE)", timeout=30)
            loaded = await kernel.execute(
                "import sys\nprint(sorted(m for m in ('zmq', 'traitlets', 'IPython') "
                f"if (getattr(sys.modules[m], '__file__', '') or '').startswith({str(work)!r})))", timeout=30)
            return mine.text, loaded.text
        finally:
            await kernel.shutdown()

    mine, loaded = asyncio.run(scenario())
    assert mine.strip() == "42"
    assert loaded.strip() == "[]"


def test_debugpy_is_importable_in_the_kernel(tmp_path: Path) -> None:
    pytest.importorskip("debugpy")

    async def scenario() -> str:
        kernel = Kernel(_config(tmp_path, tmp_path / "run"))
        await kernel.start(timeout=60)
        try:
            code = "import debugpy\nprint(debugpy.__name__, type(get_ipython().kernel).__name__)"
            result = await kernel.execute(code, timeout=30)
            return result.text
        finally:
            await kernel.shutdown()

    assert asyncio.run(scenario()).split() == ["debugpy", "IPythonKernel"]


def test_a_kernel_that_dies_during_start_is_reported_at_once(tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no interpreter here' >&2\nexit 3\n")
    broken.chmod(0o755)

    async def scenario() -> float:
        kernel = Kernel(_config(tmp_path, tmp_path / "run", python=str(broken)))
        started = time.monotonic()
        with pytest.raises(KernelLost, match="kernel did not start: the kernel process exited"):
            await kernel.start(timeout=60)
        assert kernel.proc is None and kernel.client is None
        return time.monotonic() - started

    # not a speed assertion: a dead kernel must not be waited on until the 60 s start timeout
    assert asyncio.run(scenario()) < 30
    assert "no interpreter here" in (tmp_path / "run" / "kernel" / "kernel.log").read_text()


def test_child_entry_cleans_up_its_early_kernel_when_the_root_is_gone(tmp_path: Path) -> None:
    """The child host starts its kernel before loading the agent; if the host then fails, the kernel goes too."""
    work, session = tmp_path / "work", tmp_path / "session"
    work.mkdir()
    session.mkdir()
    spec = {"id": "sub-0000", "name": "orphan", "task": "t", "depth": 1, "model": "openai/x", "cwd": str(work),
            "root_bridge": str(tmp_path / "no-root.sock"), "token": "0" * 32,
            "parent_session": str(tmp_path / "root.jsonl"), "max_turns": 3, "cell_timeout": 10, "branch": None,
            "budget": Budget(Limits(3, 100_000, 600.0, None)).snapshot(turns=0, max_turns=3).to_json(),
            "scratch": str(tmp_path / "scratch"), "sandbox": None, "role": None, "limits": BoxLimits().to_json()}
    (session / "spec.json").write_text(json.dumps(spec))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "prime_ci.child", str(session / "spec.json")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "FileNotFoundError" in proc.stderr  # the root bridge is not there: the error propagates
    conn = tmp_path / "scratch" / "kernel" / "kernel-1.json"
    assert conn.exists()  # the kernel was launched early ...
    for pid_dir in Path("/proc").iterdir():  # ... and no process with its connection file is left
        if pid_dir.name.isdigit():
            try:
                cmd = (pid_dir / "cmdline").read_bytes()
            except OSError:
                continue
            assert str(conn).encode() not in cmd, f"kernel left running: pid {pid_dir.name}"
    assert not list(tmp_path.glob("pci-*"))  # the host's bridge directory is removed
