"""The box's launcher runs a command that is its own interpreter with its own flags (the sandbox's seccomp loader)
in itself, as that interpreter would run it: same arguments, the box's limits, the exit status; anything else
it execs. One interpreter start fewer in front of every sandboxed process (issue 25)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from prime_ci.isolation.box import MARK, Box
from prime_ci.isolation.limits import MIB, Limits

REPORT = """import json, resource, sys
cmdline = open('/proc/self/cmdline', 'rb').read().split(b'\\0')
print(json.dumps({'argv': sys.argv, 'fsize': resource.getrlimit(resource.RLIMIT_FSIZE),
                  'rttime': resource.getrlimit(resource.RLIMIT_RTTIME),
                  'own_process': any(arg.startswith(b'RTTIME=') for arg in cmdline)}))
sys.exit(3)
"""


def _box() -> Box:
    return Box(Limits(pids=None, memory=None, file_size=64 * MIB), [], (MARK + 5, MARK + 10))


def test_a_python_command_with_the_launchers_flags_runs_in_the_launcher() -> None:
    box = _box()
    argv = [*box.launcher(), sys.executable, "-I", "-S", "-c", REPORT, "first", "--second"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["argv"] == ["-c", "first", "--second"], "the arguments python -c would give"
    assert seen["fsize"] == [64 * MIB, 64 * MIB]
    hard = resource.getrlimit(resource.RLIMIT_RTTIME)[1]
    assert seen["rttime"][0] == (MARK + 5 if hard == resource.RLIM_INFINITY else min(MARK + 5, hard))
    assert seen["own_process"], "a second interpreter was started for it"


def test_any_other_command_is_executed() -> None:
    box = _box()
    for command in ([sys.executable, "-c", REPORT], [sys.executable, "-I", "-c", REPORT]):
        proc = subprocess.run([*box.launcher(), *command], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 3, proc.stderr
        seen = json.loads(proc.stdout)
        assert seen["argv"] == ["-c"] and not seen["own_process"]
        assert seen["fsize"] == [64 * MIB, 64 * MIB]
    shell = subprocess.run([*box.launcher(), "/bin/sh", "-c", "exit 4"], capture_output=True, timeout=60, check=False)
    assert shell.returncode == 4
