"""The boxes every process prime-ci starts (kernels, gates, setup) runs in, and that find it again.

Each kernel generation and each gate attempt runs in a *box*:

- a cgroup under prime-ci's own, in a directory per run, when this host lets us make one (cgroup v2, or v1's
  ``pids`` and ``memory`` hierarchies; ``cgroups.py`` finds them): ``pids.max`` and the memory limit (swap off),
  and a membership that ``setsid``, ``env -i`` and double forks do not leave;
- rlimits: ``RLIMIT_FSIZE``, ``RLIMIT_CPU`` where set and, without a cgroup controller, ``RLIMIT_DATA`` for
  memory (not ``RLIMIT_AS``: V8 and the JVM reserve far more address space than they use) and
  ``RLIMIT_NPROC`` for processes (counted per user, so it is set above what the user runs now, and root ignores
  it: as root without a writable cgroup there is no process limit of our own);
- a marker in ``RLIMIT_RTTIME``, hard limit naming the run and soft limit the box: inherited across exec,
  setsid, ``env -i`` and namespaces, readable in ``/proc/<pid>/limits``, and harmless (it only bounds
  real-time-scheduled processes, after 36,000 years). Sweeps find a box's processes by it without a cgroup.

A small launcher (``python -I -S -c LAUNCHER ... -- ARGV``, in front of the sandbox's bwrap) joins the cgroups
and sets the rlimits, then execs the command: they hold from its first instruction, and bwrap and everything
it starts inherit them. The limits themselves (``limits.Limits``) come from ``PRIME_CI_LIMITS``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from prime_ci.isolation.cgroups import LAUNCHER, Hierarchy, counter, read, rmdir, run_dir_name, usable, write
from prime_ci.isolation.limits import Events, Limits

RUN_VAR = "PRIME_CI_RUN"  # the run's marker variable in the environment of everything it starts
MARK = 1 << 60  # RLIMIT_RTTIME markers: MARK + (run hash << 24) + box hash (soft) or 2**24 - 1 (hard)


def run_of(env: dict[str, str]) -> str:
    """The run a process with this environment belongs to (``RUN_VAR=value``), "" for none."""
    return f"{RUN_VAR}={env[RUN_VAR]}" if env.get(RUN_VAR) else ""


def _hash(text: str, bits: int) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> (64 - bits)


def run_marker(run: str) -> int:
    """The RLIMIT_RTTIME hard limit of every box of the run ``run``."""
    return MARK + (_hash(run, 32) << 24) + (1 << 24) - 1


@dataclass
class Box:
    """Where one kernel generation or one gate attempt runs: its cgroups (maybe none), rlimits and marker."""

    limits: Limits
    dirs: list[tuple[Hierarchy, Path]]
    marker: tuple[int, int]  # RLIMIT_RTTIME (soft, hard)

    @classmethod
    def create(cls, limits: Limits, *, run: str, name: str) -> Box:
        """A new box of the run ``run`` (a marker such as ``PRIME_CI_RUN=...``; "" for none)."""
        run = run or f"prime-ci-host-{os.getpid()}"
        name = f"{name}-{secrets.token_hex(4)}"
        dirs = []
        for hierarchy in usable() if limits.cgroups else ():
            run_path = hierarchy.path / run_dir_name(run)
            for _ in range(3):  # the run's directory goes with its last box: it may vanish in between
                try:
                    run_path.mkdir(exist_ok=True)
                    if hierarchy.version == 2 and hierarchy.controllers:
                        write(run_path / "cgroup.subtree_control",
                              " ".join(f"+{c}" for c in sorted(hierarchy.controllers)))
                    (run_path / name).mkdir()
                except FileNotFoundError:
                    continue
                except OSError:
                    break
                dirs.append((hierarchy, run_path / name))
                break
        hard = run_marker(run)
        box = cls(limits, dirs, (hard - (1 << 24) + 1 + _hash(name, 23), hard))
        box._set_limits()
        return box

    def cgroups(self) -> list[Path]:
        return [path for _, path in self.dirs]

    def controlled(self, controller: str) -> list[Path]:
        """The box's cgroup directories where ``controller`` enforces its limit."""
        return [path for hierarchy, path in self.dirs if controller in hierarchy.controllers
                and (hierarchy.version == 1 or controller in read(path / "cgroup.controllers").split())]

    def _set_limits(self) -> None:
        if self.limits.pids is not None:
            for path in self.controlled("pids"):
                write(path / "pids.max", str(self.limits.pids))
        if self.limits.memory is not None:
            for path in self.controlled("memory"):
                for name in ("memory.max", "memory.swap.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
                    if (path / name).exists():
                        write(path / name, "0" if name == "memory.swap.max" else str(self.limits.memory))

    def launcher(self) -> list[str]:
        """The argv prefix that starts a command in this box."""
        rlimits = {"RTTIME": self.marker}
        if self.limits.file_size is not None:
            rlimits["FSIZE"] = (self.limits.file_size, self.limits.file_size)
        if self.limits.cpu_seconds is not None:
            rlimits["CPU"] = (self.limits.cpu_seconds, self.limits.cpu_seconds + 5)
        if self.limits.memory is not None and not self.controlled("memory"):
            rlimits["DATA"] = (self.limits.memory, self.limits.memory)
        if self.limits.pids is not None and not self.controlled("pids") and os.geteuid() != 0:
            allowance = _user_processes() + self.limits.pids
            rlimits["NPROC"] = (allowance, allowance)
        joins = [f"join={path / 'cgroup.procs'}" for _, path in self.dirs]
        return [sys.executable, "-I", "-S", "-c", LAUNCHER, *joins,
                *(f"{key}={soft}:{hard}" for key, (soft, hard) in rlimits.items()), "--"]

    def events(self) -> Events:
        pids_max = sum(counter(path / "pids.events", "max") for path in self.controlled("pids"))
        oom = 0
        for path in self.controlled("memory"):
            oom += counter(path / "memory.events", "oom_kill") + counter(path / "memory.oom_control", "oom_kill")
        return Events(pids_max, oom)

    def seal(self) -> None:
        """No process in the box can fork any more (before it is killed)."""
        for path in self.controlled("pids"):
            write(path / "pids.max", "0")

    def remove(self) -> None:
        for _, path in self.dirs:
            rmdir(path)
            with contextlib.suppress(OSError):  # the run's last box: its directory goes too
                path.parent.rmdir()


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and entry.stat().st_uid == uid:
                    count += 1
    return count
