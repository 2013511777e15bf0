"""Issue 26 acceptance 2 through the CLI: a run's progress as a person sees it, on a terminal (tmux) and in a log."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, FIX, PRIME_CI, make_repo, wait_until
from prime_ci.testing import ScriptedServer, Step, ipython, reply
from prime_ci.testing.steps import Body

HELD_S = 120.0  # the longest the first model call is held if the test never releases it
STATUS = re.compile(r"^» model call (\d+)s · turn 1/7 · 0/90k tokens · \$0\.00/\$2\.00 · wall \S+/10m$")


class SlowFirstCall:
    """A script whose first model call is answered only when the test says so; then it fixes the test."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.steps: list[Step] = [ipython(FIX), reply("Fixed add.")]

    def __call__(self, body: Body) -> Step | None:
        if not self.release.is_set():
            self.release.wait(HELD_S)
            self.release.set()
            return ipython("print('looked')")
        return self.steps.pop(0) if self.steps else None


@pytest.fixture
def slow_server() -> Iterator[tuple[ScriptedServer, SlowFirstCall]]:
    script = SlowFirstCall()
    srv = ScriptedServer(script).start()
    try:
        yield srv, script
    finally:
        script.release.set()  # a handler holding the call lets go before the server closes
        srv.close()


def command(tmp_path: Path, repo: Path, srv: ScriptedServer, *, unset: tuple[str, ...] = (),
            **env: str) -> list[str]:
    """``prime-ci run`` as a job would start it: the venv's bin on PATH, no PRIME_CI_ setting of this process."""
    drop = [k for k in os.environ if k.startswith("PRIME_CI_") or k in unset]
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    return ["env", *(f"-u{k}" for k in drop), f"PATH={path}", "OPENAI_API_KEY=sk-test-canary",
            *(f"{k}={v}" for k, v in env.items()), PRIME_CI, "run", str(repo), "--task", "Fix the failing test.",
            "--model", "openai/scripted", "--api-base", srv.url, "--out", str(tmp_path / "out"),
            "--gate", "python -m pytest -q", "--max-turns", "7", "--max-tokens", "90000",
            "--max-cost", "2", "--price-per-mtok", "1,2", "--max-wall", "10m"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_terminal_shows_the_phase_turn_and_budgets_updated_during_a_slow_model_call(
        tmp_path: Path, slow_server: tuple[ScriptedServer, SlowFirstCall]) -> None:
    srv, script = slow_server
    repo = make_repo(tmp_path / "repo", BUGGY)
    tmux = ["tmux", "-L", f"prime-ci-test-{os.getpid()}", "-f", "/dev/null"]
    # GITHUB_ACTIONS unset: the line is off in an Actions log, and this test may run in one
    argv = command(tmp_path, repo, srv, unset=("GITHUB_ACTIONS",))
    # set before the pane starts, in the command that starts the server: remain-on-exit (a run that ends at once
    # leaves its screen to read, not a server gone with its only pane) and the shell that runs the command (else
    # the account's: nologin for a user like nobody)
    subprocess.run([*tmux, "set-option", "-g", "remain-on-exit", "on", ";", "set-option", "-g", "default-shell",
                    "/bin/sh", ";", "new-session", "-d", "-x", "200", "-y", "50", shlex.join(argv)],
                   check=True)  # fmt: skip
    try:

        def screen() -> list[str]:  # -J: a line wider than the pane comes back whole; -S -: with what scrolled off
            text = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-"], check=True, capture_output=True,
                                  text=True).stdout
            return [line.rstrip() for line in text.splitlines() if line.strip()]

        def elapsed() -> int | None:
            found = [m for line in screen() if (m := STATUS.match(line))]
            return int(found[-1][1]) if found else None

        wait_until(lambda: elapsed() is not None, timeout=120, what="the status line of the held model call")
        first = elapsed()
        assert first is not None
        wait_until(lambda: (e := elapsed()) is not None and e > first, timeout=30,
                   what="the status line to count the call's time up")
        script.release.set()

        def dead() -> bool:
            out = subprocess.run([*tmux, "display-message", "-p", "#{pane_dead} #{pane_dead_status}"],
                                 check=True, capture_output=True, text=True).stdout.split()
            return out[0] == "1"

        wait_until(dead, timeout=180, what="the run to end")
        final = screen()
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    printed = [line for line in final if not line.startswith("Pane is dead")]
    # every line the run printed starts at the left edge, whole: none was written into the status line
    assert printed and all(line.startswith("prime-ci: ") for line in printed), final
    assert any(line.startswith("prime-ci: turn 1: ipython") for line in printed), final
    assert any(line.startswith("prime-ci: gate pytest: pass") for line in printed), final
    assert printed[-1].startswith("prime-ci: completed (exit 0)"), final  # and the status line is gone


def test_a_log_gets_a_heartbeat_naming_the_slow_model_call(
        tmp_path: Path, slow_server: tuple[ScriptedServer, SlowFirstCall]) -> None:
    srv, script = slow_server
    repo = make_repo(tmp_path / "repo", BUGGY)
    log = tmp_path / "stderr.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(command(tmp_path, repo, srv, PRIME_CI_HEARTBEAT_S="1"), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=sink)
    try:
        wait_until(lambda: "prime-ci: … waiting for the model (" in log.read_text() or proc.poll() is not None,
                   timeout=120, what="a heartbeat during the held model call")
        script.release.set()
        assert proc.wait(timeout=180) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    beat = next(line for line in text.splitlines() if "waiting for the model" in line)
    assert re.fullmatch(r"prime-ci: … waiting for the model \(\d+s\) · turn 1/7 · 0/90k tokens · \$0\.00/\$2\.00 · "
                        r"wall \S+/10m", beat), beat
    assert "\r" not in text and "\x1b" not in text  # a log gets whole lines, never a redrawn one
