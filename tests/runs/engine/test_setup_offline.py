"""Issue 24 item 2 (DESIGN §13): setup the repository under review wrote (its ``prime-ci.toml``, a gate file read
from the worktree) runs without network, whatever its table says; setup with network comes only from the
operator (``--setup``, a gate file outside the repository) or from a gate file read at ``--gates-from``. Real
worktrees, the real sandbox, and a listener on the host's loopback that counts who reaches it."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo, run_inproc, wait_until
from prime_ci.engine.environment import hand_over, project_vars, run_setup
from prime_ci.engine.prepare import Prepared, prepare
from prime_ci.engine.setup import OFFLINE_HINT
from prime_ci.isolation.sandbox import bwrap_binary, scrubbed_env
from prime_ci.testing import ScriptedServer, reply


def _bwrap_runs() -> bool:
    bwrap = bwrap_binary()
    return bwrap is not None and subprocess.run([bwrap, "--unshare-user", "--ro-bind", "/", "/", "true"],
                                                capture_output=True, check=False).returncode == 0


class Listener:
    """A listener on the host's loopback that records what each connection sent, one connection at a time."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.heard: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(30)
                self.heard.append(conn.recv(100))

    def take(self) -> list[bytes]:
        """What was heard so far: a connection of our own, accepted after every earlier one, marks the end."""
        with socket.create_connection(("127.0.0.1", self.port)) as conn:
            conn.sendall(b"end")
        wait_until(lambda: self.heard[-1:] == [b"end"], what="the listener to accept its own connection")
        heard, self.heard = self.heard[:-1], []
        return heard


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() the thread waits in
    server.sock.close()
    server.thread.join(5)


REACH = """import pathlib, socket, sys, sysconfig
who, port = sys.argv[1], int(sys.argv[2])
try:
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
except OSError as exc:
    print(who, "OFFLINE", exc)
else:
    conn.sendall(who.encode())
    conn.close()
    pathlib.Path(sysconfig.get_paths()["purelib"], "sitecustomize.py").write_text("print('planted')")
    print(who, "CONNECTED")
"""


def _reach(tmp_path: Path, port: int, who: str) -> str:
    """A setup command that reports to the listener and plants a sitecustomize.py in the run environment only if
    it got through (exit 0 either way): what a repository's setup did to every later gate."""
    script = tmp_path / "reach.py"
    script.write_text(REACH)
    return f"python {script} {who} {port}"


def _setup_table(name: str, command: str, network: bool | None = None) -> str:
    line = "" if network is None else f"network = {str(network).lower()}\n"
    return f"[[setup]]\nname = \"{name}\"\ncommand = '''{command}'''\n{line}"


def _run_setup(prep: Prepared) -> tuple[list[str], str | None, list[bool]]:
    """The setup phase as a run does it, in the real sandbox; (what was said, the hint, passed per command)."""
    wt = prep.worktree
    assert prep.sandbox is not None
    prep.sandbox.writable = [str(wt.path), str(wt.root / "home")]
    prep.sandbox.readonly = [str(wt.git_dir), *prep.reach]
    env = scrubbed_env(wt.root / "home", [], project_vars(prep, {}, skills=False))
    (wt.root / "kernel").mkdir(exist_ok=True)
    hand_over(prep)  # as root, the sandbox's own uid owns what setup writes, as in a run
    said: list[str] = []
    outcomes, hint = asyncio.run(run_setup(prep, env, said.append))
    return said, hint, [o.passed for o in outcomes]


@pytest.mark.skipif(not _bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
def test_repository_setup_has_no_network_and_the_operators_has(
    tmp_path: Path, listener: Listener
) -> None:
    port = listener.port
    operator_file = tmp_path / "operator-gates.toml"
    operator_file.write_text(_setup_table("operator-file", _reach(tmp_path, port, "operator-file")))
    repo = make_repo(tmp_path / "repo", {
        **BUGGY,
        "prime-ci.toml": (_setup_table("repo-toml", _reach(tmp_path, port, "repo-toml"), network=True)
                          + _setup_table("repo-plain", _reach(tmp_path, port, "repo-plain"))),
    })
    said: list[str] = []
    prep = prepare({"repo": str(repo), "task": "t", "model": "openai/x", "api_base": "http://127.0.0.1:9/v1",
                    "sandbox": "on", "out": str(tmp_path / "out"), "gates_file": [str(operator_file)]}, said.append)
    try:
        warnings = [s for s in said if "network = true ignored" in s]
        assert len(warnings) == 1 and "'repo-toml'" in warnings[0] and "--gates-from" in warnings[0], said
        assert [(s.name, s.network, s.repository) for s in prep.setup] == [
            ("repo-toml", False, True), ("repo-plain", False, True), ("operator-file", True, False)]
        run_said, hint, passed = _run_setup(prep)
    finally:
        prep.worktree.remove()
    assert passed == [True, True, True], run_said
    assert listener.take() == [b"operator-file"], "only the operator's setup reaches the host's network"
    logs = {p.stem: p.read_text() for p in (tmp_path / "out" / "setup").glob("*.log")}
    assert "repo-toml OFFLINE" in logs["repo-toml"] and "repo-plain OFFLINE" in logs["repo-plain"], logs
    assert "operator-file CONNECTED" in logs["operator-file"]
    assert hint is None


@pytest.mark.skipif(not _bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
def test_worktree_gate_files_are_offline_and_gates_from_ones_are_not(
    tmp_path: Path, listener: Listener
) -> None:
    port = listener.port
    base = _setup_table("base", _reach(tmp_path, port, "base"))
    repo = make_repo(tmp_path / "repo", {**BUGGY, "ci/gates.toml": base})
    subprocess.run(["git", "branch", "trusted-base"], cwd=repo, check=True)
    # the pull request rewrites the gate file; read at --gates-from, the base commit's text is what runs
    (repo / "ci" / "gates.toml").write_text(_setup_table("pr", _reach(tmp_path, port, "pr"), network=True))
    make_repo(repo, {}, message="pr")
    for flags, expected in (({}, []), ({"gates_from": "trusted-base"}, [b"base"])):
        said: list[str] = []
        prep = prepare({"repo": str(repo), "task": "t", "model": "openai/x", "api_base": "http://127.0.0.1:9/v1",
                        "sandbox": "on", "out": str(tmp_path / f"out-{len(flags)}"),
                        "gates_file": [str(repo / "ci" / "gates.toml")], **flags}, said.append)
        try:
            run_said, _, passed = _run_setup(prep)
        finally:
            prep.worktree.remove()
        assert passed == [True], run_said
        assert listener.take() == expected, (flags, run_said)


@pytest.mark.skipif(not _bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
def test_a_repository_install_that_needs_the_network_says_how_to_grant_it(tmp_path: Path) -> None:
    fetch = "python -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:9/simple/', timeout=5)\""
    repo = make_repo(tmp_path / "repo", {**BUGGY, "prime-ci.toml": _setup_table("deps", fetch)})
    prep = prepare({"repo": str(repo), "task": "t", "model": "openai/x", "api_base": "http://127.0.0.1:9/v1",
                    "sandbox": "on", "out": str(tmp_path / "out")}, [].append)
    try:
        said, hint, passed = _run_setup(prep)
    finally:
        prep.worktree.remove()
    assert passed == [False]
    assert hint == OFFLINE_HINT, hint
    assert "prime-ci.toml" in OFFLINE_HINT and "without network" in OFFLINE_HINT and "--setup" in OFFLINE_HINT
    assert any(line.endswith(f"hint: {OFFLINE_HINT}") for line in said), said


@pytest.mark.skipif(not _bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
def test_repository_builds_have_no_network_in_a_run(tmp_path: Path, listener: Listener) -> None:
    """Builds run before every gate round, offline whoever wrote them: the repository's, through a whole run."""
    build = _reach(tmp_path, listener.port, "repo-build")
    repo = make_repo(tmp_path / "repo", {**BUGGY, "prime-ci.toml": f"build = ['''{build}''']\n"})
    with ScriptedServer() as server:
        server.add(reply("nothing to do"))
        run = run_inproc(tmp_path, repo, server, "--sandbox", "on", "--gate", "true")
    assert run.code == 0, run.proc.stderr
    assert [b["name"] for b in run.result["build"]] == ["reach.py"]
    assert "repo-build OFFLINE" in (run.out / "build" / "reach.py.log").read_text()
    assert listener.take() == []
