"""Starting a kernel process: the launcher, the connection file and the process itself, in its box.

Each kernel generation runs in a box of its own (``box.Box``: processes, memory, file size; a cgroup where
the host allows one), so what its cells start, ``setsid`` and ``env -i`` daemons included, dies with it.
Nothing here imports jupyter_client, zmq or asyncio, so a child host can start its kernel first and load the
rest of itself while the kernel boots (``prime_ci.kernel.client.Kernel`` connects to it afterwards).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.isolation import hostuid, spawn
from prime_ci.isolation.box import Box, run_of
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.procs import kill_box

DEFAULT_LIMIT = 8000

# ipykernel_launcher, except that ipykernel's debugger support is loaded while debugpy is hidden: no frontend
# here speaks the debug protocol, and importing debugpy was a quarter of a kernel's start-up CPU. debugpy is
# importable again once the kernel is up. The cwd (the worktree) is off sys.path while ipykernel loads.
LAUNCHER = """import sys
if sys.path[0] == '':
    del sys.path[0]
sys.modules['debugpy'] = None
import ipykernel.debugger
del sys.modules['debugpy']
from ipykernel import kernelapp
kernelapp.launch_new_instance()
"""
PORTS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}


@dataclass
class KernelConfig:
    cwd: Path
    env: dict[str, str]
    run_dir: Path
    preload: str = ""
    wrap: Callable[[list[str]], list[str]] | None = None  # e.g. the sandbox's bwrap prefix
    output_limit: int = DEFAULT_LIMIT
    interrupt_grace: float = 2.0
    max_restarts: int = 5
    python: str = sys.executable
    snapshot_dir: Path | None = None  # user variables saved here after each cell, restored after a restart
    limits: Limits = field(kw_only=True)  # of each kernel generation's box: the run's
    uid: int | None = None  # the sandbox's unprivileged host uid: it must read the connection file


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    connection_file: Path
    log: Path
    box: Box | None = None


def launch(config: KernelConfig, generation: int) -> Launched:
    """Start kernel number ``generation`` of a run dir (its own session, so its group can be killed)."""
    kdir = config.run_dir / "kernel"
    kdir.mkdir(parents=True, exist_ok=True)
    conn = kdir / f"kernel-{generation}.json"
    write_connection_file(conn, kdir / f"k{generation}")
    if config.uid is not None:
        hostuid.give(config.uid, [kdir, conn])
    log_path = kdir / "kernel.log"
    argv = [
        config.python, "-c", LAUNCHER, "-f", str(conn),
        "--IPKernelApp.parent_handle=0", "--HistoryManager.enabled=False",
        "--InteractiveShell.colors=nocolor", "--IPKernelApp.quiet=True",
    ]
    box = Box.create(config.limits, run=run_of(config.env), name=f"kernel-{generation}")
    proc = spawn.popen(config.wrap(argv) if config.wrap else argv, cwd=config.cwd, env=config.env, out=log_path,
                       box=box)
    return Launched(proc, conn, log_path, box)


def stop(proc: subprocess.Popen[bytes], box: Box | None) -> None:
    """Kill a kernel process, its group and everything in its box, and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if box is not None:
        kill_box(box, proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def write_connection_file(path: Path, ipc_base: Path) -> None:
    """An IPC connection file readable by its owner only; sockets left by a killed run are removed first."""
    for port in PORTS.values():
        with contextlib.suppress(FileNotFoundError):
            Path(f"{ipc_base}-{port}").unlink()
    info = {**PORTS, "transport": "ipc", "ip": str(ipc_base), "key": secrets.token_hex(16),
            "signature_scheme": "hmac-sha256", "kernel_name": ""}
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(info, f)
