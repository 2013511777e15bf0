"""Resource limits of every process prime-ci starts (kernels, gates, setup) and the boxes that find them again.

Each kernel generation and each gate attempt runs in a *box*:

- a cgroup under prime-ci's own, in a directory per run, when this host lets us make one (cgroup v2, or v1's
  ``pids`` and ``memory`` hierarchies): ``pids.max`` and the memory limit (swap off), and a membership that
  ``setsid``, ``env -i`` and double forks do not leave;
- rlimits: ``RLIMIT_FSIZE``, ``RLIMIT_CPU`` where set and, without a cgroup controller, ``RLIMIT_DATA`` for
  memory (not ``RLIMIT_AS``: V8 and the JVM reserve far more address space than they use) and
  ``RLIMIT_NPROC`` for processes (counted per user, so it is set above what the user runs now, and root ignores
  it: as root without a writable cgroup there is no process limit of our own);
- a marker in ``RLIMIT_RTTIME``, hard limit naming the run and soft limit the box: inherited across exec,
  setsid, ``env -i`` and namespaces, readable in ``/proc/<pid>/limits``, and harmless (it only bounds
  real-time-scheduled processes, after 36,000 years). Sweeps find a box's processes by it without a cgroup.

A small launcher (``python -I -S -c LAUNCHER ... -- ARGV``, in front of the sandbox's bwrap) joins the cgroups
and sets the rlimits, then execs the command: they hold from its first instruction, and bwrap and everything
it starts inherit them. ``PRIME_CI_LIMITS`` (``pids=4096,memory=8GiB,file_size=none,cpu=600,cgroup=off``)
changes the defaults.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prime_ci.errors import ConfigError

GIB = 1 << 30
MIB = 1 << 20
ENV = "PRIME_CI_LIMITS"
RUN_VAR = "PRIME_CI_RUN"  # the run's marker variable in the environment of everything it starts
MARK = 1 << 60  # RLIMIT_RTTIME markers: MARK + (run hash << 24) + box hash (soft) or 2**24 - 1 (hard)
_CONTROLLERS = ("pids", "memory")
_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": MIB, "mib": MIB, "g": GIB, "gib": GIB, "t": 1 << 40,
          "tib": 1 << 40}

# Runs with -I -S: nothing from the job's PYTHONPATH or site-packages can shadow the modules it imports.
LAUNCHER = """import os, resource, signal, sys
args = sys.argv[1:]
end = args.index('--')
for spec in args[:end]:
    key, _, value = spec.partition('=')
    if key == 'join':
        fd = os.open(value, os.O_WRONLY)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        continue
    which = getattr(resource, 'RLIMIT_' + key)
    soft, hard = (int(v) for v in value.split(':'))
    ceiling = resource.getrlimit(which)[1]
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    try:
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        pass
for name in ('SIGPIPE', 'SIGXFSZ', 'SIGXFZ'):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
os.execvp(args[end + 1], args[end + 1:])
"""


@dataclass(frozen=True)
class Limits:
    """Per box; None: no limit of ours. ``cgroups`` False: rlimits only (as where /sys/fs/cgroup is read-only)."""

    pids: int | None = 2048
    memory: int | None = 4 * GIB
    file_size: int | None = GIB
    cpu_seconds: int | None = None
    cgroups: bool = True


def human(size: int) -> str:
    for unit, name in ((1 << 40, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if size >= unit:
            value = size / unit
            return f"{value:.0f} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{size} bytes"


def parse(spec: str) -> Limits:
    """``pids=4096,memory=8GiB,file_size=none,cpu=600,cgroup=off``: changes to the defaults."""
    out = Limits()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip().lower().replace("-", "_"), value.strip().lower()
        if not sep:
            raise ConfigError(f"{ENV}: {item!r} is not NAME=VALUE")
        if key in ("cgroup", "cgroups"):
            if value not in ("on", "off"):
                raise ConfigError(f"{ENV}: cgroup must be on or off, not {value!r}")
            out = replace(out, cgroups=value == "on")
            continue
        field = {"cpu": "cpu_seconds", "fsize": "file_size"}.get(key, key)
        if field not in ("pids", "memory", "file_size", "cpu_seconds"):
            raise ConfigError(f"{ENV}: unknown limit {key!r} (pids, memory, file_size, cpu, cgroup)")
        number: int | None = None
        if value not in ("none", "unlimited", "off"):
            match = re.fullmatch(r"(\d+)\s*([a-z]*)", value)
            if match is None or match[2] not in _UNITS or int(match[1]) <= 0:
                raise ConfigError(f"{ENV}: {key}={value!r} is not a positive number (sizes: 512MiB, 4GiB)")
            number = int(match[1]) * _UNITS[match[2]]
        changes: dict[str, Any] = {field: number}
        out = replace(out, **changes)
    return out


def passed_on() -> dict[str, str]:
    """The limits setting for a process that starts kernels of its own (an rlm child's host), whose environment
    is otherwise scrubbed."""
    return {ENV: os.environ[ENV]} if os.environ.get(ENV) else {}


def configured(environ: dict[str, str] | None = None) -> Limits:
    """The defaults, changed by ``PRIME_CI_LIMITS`` in the host's environment."""
    return parse((os.environ if environ is None else environ).get(ENV, ""))


@dataclass(frozen=True)
class Hierarchy:
    """prime-ci's own cgroup in one mounted hierarchy, and the controllers its children can use there."""

    path: Path
    version: int
    controllers: frozenset[str]


@dataclass(frozen=True)
class Events:
    pids_max: int = 0  # forks refused by pids.max
    oom_kills: int = 0  # processes killed by the memory limit


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root, mount point, fstype, super options) of the cgroup mounts."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], Path(fields[4].replace("\\040", " ")), tail[0], set(tail[2].split(","))))
    return found


def _own_path(root: str, mount: Path, cgroup: str) -> Path | None:
    if cgroup != root and not cgroup.startswith(root.rstrip("/") + "/"):
        return None
    return mount / cgroup[len(root):].lstrip("/")


def _discover() -> list[Hierarchy]:
    """v1's pids and memory hierarchies when mounted (a v2 beside them is hybrid mode's), else the v2 one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    own = {}
    for line in lines:
        _, controllers, cgroup = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["<v2>"]:
            own[name] = cgroup
    v1: list[Hierarchy] = []
    v2: list[Hierarchy] = []
    for root, mount, fstype, options in _mounts():
        if fstype == "cgroup":
            for name in sorted(options.intersection(_CONTROLLERS)):
                if name in own and (path := _own_path(root, mount, own[name])) is not None:
                    v1.append(Hierarchy(path, 1, frozenset({name})))
        elif "<v2>" in own and (path := _own_path(root, mount, own["<v2>"])) is not None:
            for name in _CONTROLLERS:  # fails (EBUSY) unless our cgroup holds no processes or is the root
                with contextlib.suppress(OSError):
                    (path / "cgroup.subtree_control").write_text(f"+{name}")
            try:
                enabled = set((path / "cgroup.subtree_control").read_text().split())
            except OSError:
                continue
            v2.append(Hierarchy(path, 2, frozenset(enabled.intersection(_CONTROLLERS))))
    return v1 or v2[:1]


@functools.cache
def usable() -> tuple[Hierarchy, ...]:
    """The hierarchies where this process can make a cgroup and put a process in it (probed once)."""
    found = []
    for hierarchy in _discover():
        for stale in hierarchy.path.glob("prime-ci-probe-*"):  # a probing process killed midway left it
            if not Path("/proc", stale.name.split("-")[3]).exists():
                _rmdir(stale, wait=0)
        probe = hierarchy.path / f"prime-ci-probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            argv = [sys.executable, "-I", "-S", "-c", LAUNCHER, f"join={probe / 'cgroup.procs'}", "--",
                    sys.executable, "-I", "-S", "-c", ""]
            if subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0:
                found.append(hierarchy)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            _rmdir(probe)
    return tuple(found)


def run_of(env: dict[str, str]) -> str:
    """The run a process with this environment belongs to (``RUN_VAR=value``), "" for none."""
    return f"{RUN_VAR}={env[RUN_VAR]}" if env.get(RUN_VAR) else ""


def run_dir_name(run: str) -> str:
    return "prime-ci-" + hashlib.sha256(run.encode()).hexdigest()[:16]


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
                        _write(run_path / "cgroup.subtree_control",
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
                and (hierarchy.version == 1 or controller in _read(path / "cgroup.controllers").split())]

    def _set_limits(self) -> None:
        if self.limits.pids is not None:
            for path in self.controlled("pids"):
                _write(path / "pids.max", str(self.limits.pids))
        if self.limits.memory is not None:
            for path in self.controlled("memory"):
                for name in ("memory.max", "memory.swap.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
                    if (path / name).exists():
                        _write(path / name, "0" if name == "memory.swap.max" else str(self.limits.memory))

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
        pids_max = sum(_counter(path / "pids.events", "max") for path in self.controlled("pids"))
        oom = 0
        for path in self.controlled("memory"):
            oom += _counter(path / "memory.events", "oom_kill") + _counter(path / "memory.oom_control", "oom_kill")
        return Events(pids_max, oom)

    def seal(self) -> None:
        """No process in the box can fork any more (before it is killed)."""
        for path in self.controlled("pids"):
            _write(path / "pids.max", "0")

    def remove(self) -> None:
        for _, path in self.dirs:
            _rmdir(path)
            with contextlib.suppress(OSError):  # the run's last box: its directory goes too
                path.parent.rmdir()


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


def run_cgroups(run: str) -> list[Path]:
    """The cgroup directories of the run ``run``, deepest first (the order to remove them in)."""
    found = []
    for hierarchy in usable():
        top = hierarchy.path / run_dir_name(run)
        if top.is_dir():
            found += [p for p in top.rglob("*") if p.is_dir()] + [top]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def remove_run(run: str) -> None:
    """Remove the run's (emptied) cgroup directories."""
    for path in run_cgroups(run):
        _rmdir(path)


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and entry.stat().st_uid == uid:
                    count += 1
    return count


def _counter(path: Path, key: str) -> int:
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    with contextlib.suppress(OSError):
        path.write_text(value)


def _rmdir(path: Path, wait: float = 2.0) -> None:
    """rmdir a cgroup; its killed processes may take a moment to leave it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
