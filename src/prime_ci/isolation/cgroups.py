"""prime-ci's own cgroups: finding them (v2, or v1's ``pids`` and ``memory`` hierarchies), probing once whether
this host lets us make a cgroup and put a process in it, and the run's directories there.

The limits are set and enforced by a box (``box.Box``): this module only knows where boxes can go. Every box of
a run is a directory under the run's own (``run_dir_name``), so the run's leftovers are found and removed in
one place.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prime_ci.isolation.paths import relative_inside

_CONTROLLERS = ("pids", "memory")
# the file holding each controller's limit (v2's or v1's) and a value that sets no limit, for the probe
LIMIT_FILES = {"pids": (("pids.max", "max"),), "memory": (("memory.max", "max"), ("memory.limit_in_bytes", "-1"))}

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
for name in ('SIGPIPE', 'SIGXFSZ'):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
rest = args[end + 1:]
if rest[:4] == [sys.executable, '-I', '-S', '-c'] and len(rest) > 4:
    sys.argv = ['-c', *rest[5:]]
    exec(compile(rest[4], '<string>', 'exec'), {'__name__': '__main__'})
    sys.exit(0)
os.execvp(rest[0], rest)
"""
# The launcher runs a command that is this interpreter with its own flags (the sandbox's seccomp loader) in
# itself, as that interpreter would: one interpreter start fewer in front of every sandboxed process.


@dataclass(frozen=True)
class Hierarchy:
    """prime-ci's own cgroup in one mounted hierarchy, and the controllers its children can use there."""

    path: Path
    version: int
    controllers: frozenset[str]


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root, mount point, fstype, super options) of the cgroup mounts."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], Path(fields[4].replace("\\040", " ")), tail[0], set(tail[2].split(","))))
    return found


def _own_path(root: str, mount: Path, cgroup: str) -> Path | None:
    rel = relative_inside(root, cgroup)
    return None if rel is None else mount / rel


def _discover() -> list[Hierarchy]:
    """v1's pids and memory hierarchies when mounted (a v2 beside them is hybrid mode's), else the v2 one."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
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
                    (path / "cgroup.subtree_control").write_text(f"+{name}", encoding="utf-8")
            try:
                enabled = set((path / "cgroup.subtree_control").read_text(encoding="utf-8").split())
            except OSError:
                continue
            v2.append(Hierarchy(path, 2, frozenset(enabled.intersection(_CONTROLLERS))))
    return v1 or v2[:1]


@functools.cache
def usable() -> tuple[Hierarchy, ...]:
    """The hierarchies where this process can make a cgroup and put a process in it (probed once), each with the
    controllers whose limit it can also write there."""
    found = []
    for hierarchy in _discover():
        for stale in hierarchy.path.glob("prime-ci-probe-*"):  # a probing process killed midway left it
            if not Path("/proc", stale.name.split("-")[3]).exists():
                rmdir(stale, wait=0)
        probe = hierarchy.path / f"prime-ci-probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            argv = [sys.executable, "-I", "-S", "-c", LAUNCHER, f"join={probe / 'cgroup.procs'}", "--",
                    sys.executable, "-I", "-S", "-c", ""]
            if subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0:
                controllers = writable_limits(probe, hierarchy.controllers)
                found.append(Hierarchy(hierarchy.path, hierarchy.version, controllers))
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            rmdir(probe)
    return tuple(found)


def limit_file(path: Path, controller: str) -> Path | None:
    """The file of the cgroup ``path`` that holds ``controller``'s limit (v2's or v1's), None when it has none."""
    return next((path / name for name, _ in LIMIT_FILES[controller] if (path / name).exists()), None)


def writable_limits(path: Path, controllers: frozenset[str]) -> frozenset[str]:
    """Those of ``controllers`` whose limit this process can write in the cgroup ``path`` (written: no limit)."""
    values = {name: value for pairs in LIMIT_FILES.values() for name, value in pairs}
    return frozenset(c for c in controllers
                     if (file := limit_file(path, c)) is not None and write(file, values[file.name]))


def run_dir_name(run: str) -> str:
    return "prime-ci-" + hashlib.sha256(run.encode()).hexdigest()[:16]


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
        rmdir(path)


def counter(path: Path, key: str) -> int:
    """The ``key`` line of a cgroup's counter file (``pids.events``, ``memory.events``), 0 when missing."""
    for line in read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def write(path: Path, value: str) -> bool:
    """Write a cgroup file; False when the kernel or the permissions refused it (the caller decides what then)."""
    try:
        path.write_text(value, encoding="utf-8")
    except OSError:
        return False
    return True


def rmdir(path: Path, wait: float = 2.0) -> None:
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
