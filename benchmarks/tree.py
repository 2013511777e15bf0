"""Process trees for the benchmarks: RSS sampling (psutil) and cleanup of everything a measurement started."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field

import psutil

MB = 1024 * 1024


def role(cmdline: list[str], root: bool = False) -> str:
    """A short label for a process of a measured tree; the root is the prime-ci host or the floor process."""
    if root:
        return "floor" if any(arg.endswith("floor.py") for arg in cmdline) else "host"
    if cmdline and os.path.basename(cmdline[0]) == "bwrap":
        return "bwrap"
    # a kernel: stock (`-m ipykernel_launcher`) or prime-ci's launcher (`-c` code that runs ipykernel's kernelapp)
    if "ipykernel_launcher" in cmdline or any("kernelapp.launch_new_instance" in arg for arg in cmdline):
        return "kernel"
    # a child host: `python -m prime_ci.child SPEC`, or the CLI's hidden `prime-ci child SPEC`
    if "prime_ci.child" in cmdline or (len(cmdline) > 2 and cmdline[-2] == "child" and "prime" in cmdline[-3]):
        return "child-host"
    return os.path.basename(cmdline[0]) if cmdline else "?"


@dataclass
class Sample:
    total: int
    by_pid: dict[int, int]
    parents: dict[int, int]


@dataclass
class TreeSampler:
    """Samples the RSS of a process and all its descendants every `interval` seconds, in a thread.

    Keeps the peak of the summed tree, each process's own peak RSS and, for every `child-host` process, the
    peak of its subtree (the child host plus its kernel and anything else it started). A process that still
    has its parent's command line is a fork that has not exec'd yet: its pages are the parent's (copy on
    write), so it is left out of the sums until it execs. For hosts and child hosts it notes whether litellm's
    native module is mapped (``/proc/PID/maps``): evidence of an ``import litellm`` that needs no cooperation.
    """

    pid: int
    interval: float = 0.05
    peak_total: int = 0
    peak_by_pid: dict[int, int] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    peak_subtree: dict[int, int] = field(default_factory=dict)  # child-host pid -> peak RSS of its subtree
    litellm_mapped: dict[int, bool] = field(default_factory=dict)  # (child) host pid -> litellm in its maps
    samples: int = 0
    _cmdlines: dict[int, list[str]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            sample = self.sample(root)
            if sample is None:
                return
            self._record(sample)
            self._stop.wait(self.interval)

    def _settle(self, proc: psutil.Process, ppid: int) -> bool:
        """Label a process once it runs its own program; False while it is an un-exec'd fork."""
        if proc.pid in self.roles:
            return True
        cmdline = proc.cmdline()
        parent = self._cmdlines.get(ppid)
        if parent is None:
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(ppid).cmdline()
        if parent == cmdline and role(cmdline) != "bwrap":  # bwrap's pid-namespace init never execs
            return False
        self._cmdlines[proc.pid] = cmdline
        self.roles[proc.pid] = role(cmdline, root=proc.pid == self.pid)
        return True

    def sample(self, root: psutil.Process) -> Sample | None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return None
        by_pid: dict[int, int] = {}
        parents: dict[int, int] = {}
        for proc in procs:
            try:
                with proc.oneshot():
                    ppid = parents[proc.pid] = proc.ppid()
                    if self._settle(proc, ppid):
                        by_pid[proc.pid] = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        return Sample(sum(by_pid.values()), by_pid, parents)

    def _record(self, sample: Sample) -> None:
        self.samples += 1
        self.peak_total = max(self.peak_total, sample.total)
        for pid, rss in sample.by_pid.items():
            self.peak_by_pid[pid] = max(self.peak_by_pid.get(pid, 0), rss)
        for pid in sample.by_pid:
            kind = self.roles.get(pid)
            if kind == "child-host":
                total = sum(rss for p, rss in sample.by_pid.items() if _descends(p, pid, sample.parents))
                self.peak_subtree[pid] = max(self.peak_subtree.get(pid, 0), total)
            if kind in ("host", "child-host") and not self.litellm_mapped.get(pid) and self.samples % 4 == 1:
                self.litellm_mapped[pid] = _maps_litellm(pid)

    def peak_of_role(self, name: str) -> int:
        """The largest single-process peak among processes with this role (0 if none was seen)."""
        return max((rss for pid, rss in self.peak_by_pid.items() if self.roles.get(pid) == name), default=0)


def _maps_litellm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return any("/litellm/" in line for line in maps)
    except OSError:
        return False


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = 0
    while pid and seen < 64:
        if pid == ancestor:
            return True
        pid = parents.get(pid, 0)
        seen += 1
    return False


def kill_tree(pid: int, grace: float = 3.0, sig: int = signal.SIGTERM) -> int:
    """Signal a process and its descendants, SIGKILL what is left after `grace`; returns how many there were."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(sig)
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)
    return len(procs)


def leftovers(expected: set[int] | None = None) -> list[psutil.Process]:
    """Descendants of this process that are still around (orphans re-parent here: see `become_subreaper`)."""
    expected = expected or set()
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in expected]


def reap_leftovers(roles: dict[int, str] | None = None) -> tuple[list[str], list[str]]:
    """Kill and reap leftover descendants: (live processes, zombies), each described by pid and role.

    A zombie here is a process of the measured tree that exited but was not reaped by its parent before
    that parent exited (it re-parented to this subreaper); a live one outlived the run.
    """
    roles = roles or {}
    live: list[str] = []
    zombies: list[str] = []
    for proc in leftovers():
        try:
            name = roles.get(proc.pid) or proc.name()
            status = proc.status()
            if status == psutil.STATUS_ZOMBIE:
                zombies.append(f"{proc.pid} ({name})")
            else:
                live.append(f"{proc.pid} ({name}) {' '.join(proc.cmdline())[:120]} [{status}]")
        except psutil.Error:
            zombies.append(f"{proc.pid} (?)")
        kill_tree(proc.pid, grace=1.0)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(proc.pid, 0)
    return live, zombies


def become_subreaper() -> None:
    """Orphans of the measured runs re-parent to the benchmark, so it can find and kill them."""
    from prime_ci.isolation.procs import enable_subreaper

    enable_subreaper()


def wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.05)
