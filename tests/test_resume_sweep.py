"""Issue 24 item 9: after ``kill -9`` and ``prime-ci resume``, nothing of the killed run is left: its processes,
its (emptied) cgroup directories and its temporary directories (the bridges' socket directories) are swept."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from conftest import PRIME_CI, wait_for_chat
from prime_ci.isolation import cgroups
from prime_ci.isolation.box import run_needle
from prime_ci.testing import ScriptedServer
from test_resume import counting_script


def test_resume_sweeps_what_the_killed_run_left(tmp_path: Path, buggy_repo: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))  # short enough for the bridges' sockets to go in it
    try:
        _kill_and_resume(tmp, tmp_path, buggy_repo)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_and_resume(tmp: Path, tmp_path: Path, buggy_repo: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}, "OPENAI_API_KEY": "sk-test",
           "TMPDIR": str(tmp)}
    out = tmp_path / "out"
    with ScriptedServer(script=counting_script) as srv:
        log = tmp_path / "run.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen([PRIME_CI, "run", str(buggy_repo), "--task", "count", "--model", "openai/x",
                                     "--api-base", srv.url, "--out", str(out), "--sandbox", "off"], env=env,
                                    stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_for_chat(srv, 2, proc)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log.read_text(errors='replace')}") from None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        run = next(json.loads(line)["data"] for line in (out / "session.jsonl").read_text().splitlines()
                   if '"prime_ci.run"' in line)
        killed = run_needle(run["marker"]).decode()
        left = sorted(p.name for p in tmp.iterdir())
        assert any(name.startswith("pci-") for name in left), left  # what the kill left: the bridge's directory
        resumed = subprocess.run([PRIME_CI, "resume", str(out)], env=env, capture_output=True, text=True,
                                 timeout=180, stdin=subprocess.DEVNULL)
    assert resumed.returncode == 0, resumed.stderr
    assert cgroups.run_cgroups(killed) == [], "the killed run's cgroup directories"
    assert sorted(p.name for p in tmp.iterdir()) == [], "the killed run's temporary directories"
