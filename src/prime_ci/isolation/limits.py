"""Resource limits of every process prime-ci starts (kernels, gates, setup): what they are, how ``--limits`` or
``PRIME_CI_LIMITS`` (``pids=4096,memory=8GiB,file_size=none,cpu=600,cgroup=off``) change the defaults, which
limit a process ran into, and the run summary's line on how each is enforced here.

A run resolves its limits once (``resolve``), keeps them in its settings (recorded in the session, so a resumed
run has them too) and hands them to every kernel, gate, setup command and rlm child explicitly.

They are enforced by the box each kernel generation and gate attempt runs in (``box.Box``: a cgroup where
``cgroups.py`` finds one this host lets us make, rlimits, and a marker that finds its processes again).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from prime_ci.errors import ConfigError
from prime_ci.isolation.cgroups import usable

GIB = 1 << 30
MIB = 1 << 20
ENV = "PRIME_CI_LIMITS"
_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": MIB, "mib": MIB, "g": GIB, "gib": GIB, "t": 1 << 40,
          "tib": 1 << 40}


@dataclass(frozen=True)
class Limits:
    """Per box; None: no limit of ours. ``cgroups`` False: rlimits only (as where /sys/fs/cgroup is read-only)."""

    pids: int | None = 2048
    memory: int | None = 4 * GIB
    file_size: int | None = GIB
    cpu_seconds: int | None = None
    cgroups: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Limits:
        return cls(**data)


def human(size: int) -> str:
    for unit, name in ((1 << 40, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if size >= unit:
            value = size / unit
            return f"{value:.0f} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{size} bytes"


def parse(spec: str, what: str = ENV) -> Limits:
    """``pids=4096,memory=8GiB,file_size=none,cpu=600,cgroup=off``: changes to the defaults (errors name ``what``)."""
    out = Limits()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip().lower().replace("-", "_"), value.strip().lower()
        if not sep:
            raise ConfigError(f"{what}: {item!r} is not NAME=VALUE")
        if key in ("cgroup", "cgroups"):
            if value not in ("on", "off"):
                raise ConfigError(f"{what}: cgroup must be on or off, not {value!r}")
            out = replace(out, cgroups=value == "on")
            continue
        field = {"cpu": "cpu_seconds", "fsize": "file_size"}.get(key, key)
        if field not in ("pids", "memory", "file_size", "cpu_seconds"):
            raise ConfigError(f"{what}: unknown limit {key!r} (pids, memory, file_size, cpu, cgroup)")
        number: int | None = None
        if value not in ("none", "unlimited", "off"):
            match = re.fullmatch(r"(\d+)\s*([a-z]*)", value)
            if match is None or match[2] not in _UNITS or int(match[1]) <= 0:
                raise ConfigError(f"{what}: {key}={value!r} is not a positive number (sizes: 512MiB, 4GiB)")
            number = int(match[1]) * _UNITS[match[2]]
        changes: dict[str, Any] = {field: number}
        out = replace(out, **changes)
    return out


def resolve(flag: str | None) -> Limits:
    """The limits, resolved once: ``--limits`` (``flag``) over ``PRIME_CI_LIMITS`` in the host's environment
    over the defaults. A bad value is a ConfigError (exit 2) naming where it came from."""
    if flag is not None:
        return parse(flag, "--limits")
    return parse(os.environ.get(ENV, ""))


@dataclass(frozen=True)
class Events:
    pids_max: int = 0  # forks refused by pids.max
    oom_kills: int = 0  # processes killed by the memory limit


def reason(limits: Limits, before: Events, after: Events, returncode: int | None) -> str | None:
    """Which limit of the box ended or hurt its process, in one line, or None."""
    if after.oom_kills > before.oom_kills and limits.memory is not None:
        return f"killed: memory limit {human(limits.memory)}"
    if returncode is not None and limits.file_size is not None and returncode in (-signal.SIGXFSZ,
                                                                                  128 + signal.SIGXFSZ):
        return f"killed: file size limit {human(limits.file_size)}"
    if returncode is not None and limits.cpu_seconds is not None and returncode in (-signal.SIGXCPU,
                                                                                    128 + signal.SIGXCPU):
        return f"killed: cpu time limit {limits.cpu_seconds}s"
    if after.pids_max > before.pids_max and limits.pids is not None:
        return f"pids limit {limits.pids} reached: forks were refused"
    return None


def status(limits: Limits) -> str:
    """One line for a run's summary: each limit and how it is enforced here."""
    cgroup = {c for h in (usable() if limits.cgroups else ()) for c in h.controllers}
    how = "cgroup" if "pids" in cgroup else "RLIMIT_NPROC" if os.geteuid() else "not enforced: root, no cgroup"
    pids = "none" if limits.pids is None else f"{limits.pids} ({how})"
    memory = "none" if limits.memory is None else (
        f"{human(limits.memory)} ({'cgroup' if 'memory' in cgroup else 'RLIMIT_DATA'})")
    size = "none" if limits.file_size is None else human(limits.file_size)
    cpu = "none" if limits.cpu_seconds is None else f"{limits.cpu_seconds}s"
    return f"processes {pids}, memory {memory}, file size {size}, cpu {cpu}"
