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
it starts inherit them. The limits themselves (``limits.Limits``) are the run's (``limits.resolve``). A cgroup
limit counts only once written: where the write fails, the box falls back to the rlimit as if there were no
controller.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.isolation.cgroups import (
    LAUNCHER,
    Hierarchy,
    counter,
    limit_file,
    read,
    rmdir,
    run_dir_name,
    usable,
    write,
)
from prime_ci.isolation.limits import Events, Limits

RUN_VAR = "PRIME_CI_RUN"  # the run's marker variable in the environment of everything it starts
MARK = 1 << 60  # RLIMIT_RTTIME markers: MARK + (run hash << 24) + box hash (soft) or 2**24 - 1 (hard)


def run_needle(marker: str) -> bytes:
    """``RUN_VAR=marker``: what the run's processes carry in their environment (a sweep looks for it) and, as
    text, the name of the run their boxes belong to (``run_of``)."""
    return f"{RUN_VAR}={marker}".encode()


def run_of(env: dict[str, str]) -> str:
    """The run a process with this environment belongs to (``run_needle`` of its marker), "" for none."""
    return run_needle(env[RUN_VAR]).decode() if env.get(RUN_VAR) else ""


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
    enforced: dict[str, list[Path]] = field(default_factory=dict)  # controller -> where its limit was written

    @classmethod
    def create(cls, limits: Limits, *, run: str, name: str) -> Box:
        """A new box of the run ``run`` (``run_of`` the environment of what runs in it; "" for none)."""
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

    def available(self, controller: str) -> list[Path]:
        """The box's cgroup directories where ``controller`` is on (its counters, ``seal``)."""
        return [path for hierarchy, path in self.dirs if controller in hierarchy.controllers
                and (hierarchy.version == 1 or controller in read(path / "cgroup.controllers").split())]

    def controlled(self, controller: str) -> list[Path]:
        """The box's cgroup directories where ``controller`` enforces its limit: where ``_set_limits`` wrote it."""
        return list(self.enforced.get(controller, []))

    def _set_limits(self) -> None:
        """Write the limits into the box's cgroups and record where they took (``enforced``): a limit file the
        write failed on enforces nothing, and ``launcher`` then falls back to the rlimit."""
        for controller, limit in (("pids", self.limits.pids), ("memory", self.limits.memory)):
            if limit is None:
                continue
            for path in self.available(controller):
                if (file := limit_file(path, controller)) is not None and write(file, str(limit)):
                    self.enforced.setdefault(controller, []).append(path)
        for path in self.controlled("memory"):  # and no swapping around it, where the host has swap
            for name, value in (("memory.swap.max", "0"), ("memory.memsw.limit_in_bytes", str(self.limits.memory))):
                if (path / name).exists():
                    write(path / name, value)

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
        pids_max = sum(counter(path / "pids.events", "max") for path in self.available("pids"))
        oom = 0
        for path in self.available("memory"):
            oom += counter(path / "memory.events", "oom_kill") + counter(path / "memory.oom_control", "oom_kill")
        return Events(pids_max, oom)

    def seal(self) -> None:
        """No process in the box can fork any more (before it is killed)."""
        for path in self.available("pids"):
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
