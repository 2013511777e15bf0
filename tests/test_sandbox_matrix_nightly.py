"""Issue 36 (nightly half of the environment matrix): the sandbox's contract as a user that is not root, and where
user namespaces are refused.

- As ``nobody`` (a user whose home, ``/nonexistent``, does not exist), with REPO and its ``.venv``, ``--python``
  and ``--harness`` under a 0700 directory of its own: a run that fixes a failing test ends exit 0 sandboxed
  (network off, host read-only, secrets absent).
- Where user namespaces are refused (``user.max_user_namespaces`` 0 in a namespace of the test's own, as in a
  container whose seccomp profile forbids them): ``--sandbox auto`` runs with one warning line, ``on`` exits 5
  with one line, and no model call is made.

The runs are started by root (the test) as ``nobody``, from a prime-ci that user installed under ``/tmp`` (the
lock and this checkout, on the system's Python: the dev environment's interpreter may live in root's home).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, FIX, PYTEST_GATE, make_repo
from prime_ci.testing import ScriptedServer, ipython, reply
from test_sandbox_root import bwrap_runs

NOBODY = pwd.getpwnam("nobody")
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
pytestmark = [
    pytest.mark.nightly,
    pytest.mark.skipif(os.geteuid() != 0, reason="starts prime-ci as another user: needs root"),
    pytest.mark.skipif(not bwrap_runs(), reason="bubblewrap cannot make a user namespace here"),
    pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"needs {SYSTEM_PYTHON}"),
]
ROOT = Path(__file__).resolve().parents[1]
SECRET_ENV = "PRIME_CI_MATRIX_SECRET"
# what the kernel may not do: reach the network, write outside the worktree, see a secret of the job's
CONTRACT = ("import os, socket\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=3); print('NET open')\n"
            "except OSError as e:\n    print('NET refused', e.errno)\n"
            "try:\n    open('/usr/prime-ci-matrix', 'w'); print('HOST writable')\n"
            "except OSError as e:\n    print('HOST refused', e.errno)\n"
            f"print('SECRET', {SECRET_ENV!r} in os.environ)\n")
# the gate: secrets absent, the host read-only, and the tests pass
GATE = (f'test -z "${SECRET_ENV}" && ! touch /usr/prime-ci-matrix-gate 2>/dev/null && {PYTEST_GATE}')


@pytest.fixture(scope="module")
def nobody_env() -> Iterator[Path]:
    """prime-ci installed by ``nobody`` in a venv under /tmp: the lock, then this checkout (not editable)."""
    base = Path(tempfile.mkdtemp(prefix="pci-nobody-env-"))
    env = base / "env"
    uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or "uv"
    subprocess.run([uv, "venv", "-q", "--python", SYSTEM_PYTHON, str(env)], check=True, timeout=300)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(env / "bin" / "python"), "--no-deps",
                    "-r", str(ROOT / "requirements.lock"), str(ROOT)], check=True, timeout=900)
    subprocess.run(["chown", "-R", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}", str(base)], check=True)
    base.chmod(0o755)
    yield env
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def own_dir() -> Iterator[Path]:
    """A 0700 directory of nobody's, outside /tmp and any home."""
    path = Path(tempfile.mkdtemp(prefix="pci-nobody-", dir="/var/tmp"))
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(env_dir: Path, argv: list[str], cwd: Path, server: ScriptedServer, *, no_userns: bool = False
              ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.pathsep.join([str(env_dir / "bin"), "/usr/local/bin:/usr/bin:/bin"]),
           "HOME": NOBODY.pw_dir, "USER": "nobody", "LANG": "C.UTF-8", "OPENAI_API_KEY": "sk-test-canary",
           SECRET_ENV: "matrix-secret-7a1"}
    drop = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
            "--inh-caps=-all", "--"]
    full = [*drop, str(env_dir / "bin" / "prime-ci"), "run", *argv, "--model", "openai/scripted",
            "--api-base", server.url]
    if no_userns:
        full = [sys.executable, str(Path(__file__).parent / "no_userns.py"), *full]
    return subprocess.run(full, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def job_venv(env_dir: Path, path: Path) -> Path:
    """A job's venv on the system's Python whose packages are ``env_dir``'s (pytest)."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    site = next(path.glob("lib/python*/site-packages"))
    (site / "job.pth").write_text(str(next(env_dir.glob("lib/python*/site-packages"))) + "\n")
    return path / "bin" / "python"


def owned_repo(base: Path, files: dict[str, str]) -> Path:
    repo = make_repo(base / "repo", files)
    subprocess.run(["chown", "-R", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}", str(base)], check=True)
    return repo


def fixed_sandboxed(proc: subprocess.CompletedProcess[str], out: Path, server: ScriptedServer) -> None:
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["sandbox"].startswith("on (bubblewrap"), result["sandbox"]
    seen = str(server.chat_requests[1].body["messages"][-1]["content"])
    assert "NET refused" in seen and "HOST refused" in seen and "SECRET False" in seen, seen
    assert result["gates"][-1]["passed"]
    assert "+    return a + b" in (out / "patch.diff").read_text()


def test_as_nobody_without_a_home_repo_venv_and_harness_under_its_own_closed_directory(
    own_dir: Path, server: ScriptedServer, nobody_env: Path
) -> None:
    assert not os.path.exists(NOBODY.pw_dir)
    repo = owned_repo(own_dir, {**BUGGY, ".gitignore": BUGGY[".gitignore"] + ".venv/\n"})
    job_venv(nobody_env, repo / ".venv")
    harness = own_dir / "harness"
    harness.mkdir()
    subprocess.run(["chown", "-R", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}", str(own_dir)], check=True)
    out = own_dir / "out"
    server.add(ipython(CONTRACT), ipython(FIX), reply("done"))
    proc = as_nobody(nobody_env, [str(repo), "--task", "Fix it.", "--out", str(out), "--sandbox", "on", "--harness",
                      str(harness), "--gate", GATE], own_dir, server)
    fixed_sandboxed(proc, out, server)


def test_as_nobody_with_python_under_its_own_closed_directory(own_dir: Path, server: ScriptedServer,
                                                              nobody_env: Path) -> None:
    repo = owned_repo(own_dir, BUGGY)
    python = job_venv(nobody_env, own_dir / "tools" / "job")
    subprocess.run(["chown", "-R", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}", str(own_dir)], check=True)
    out = own_dir / "out"
    server.add(ipython(CONTRACT), ipython(FIX), reply("done"))
    proc = as_nobody(nobody_env, [str(repo), "--task", "Fix it.", "--out", str(out), "--sandbox", "on", "--python",
                      str(python), "--gate", GATE], own_dir, server)
    fixed_sandboxed(proc, out, server)


def test_where_user_namespaces_are_refused_auto_warns_once_and_on_exits_5(
    own_dir: Path, server: ScriptedServer, nobody_env: Path
) -> None:
    repo = owned_repo(own_dir, BUGGY)
    server.add(ipython(FIX), reply("done"))
    auto = as_nobody(nobody_env, [str(repo), "--task", "Fix it.", "--out", str(own_dir / "auto"), "--sandbox", "auto",
                      "--gate", PYTEST_GATE], own_dir, server, no_userns=True)
    assert auto.returncode == 0, auto.stderr
    warned = [line for line in auto.stderr.splitlines() if "--sandbox auto" in line]
    assert len(warned) == 1 and "running without the sandbox" in warned[0], auto.stderr
    assert "user namespaces are refused here" in warned[0] and "--sandbox off" in warned[0]
    asked = len(server.chat_requests)
    server.add(reply("must never be called"))
    on = as_nobody(nobody_env, [str(repo), "--task", "Fix it.", "--out", str(own_dir / "on"), "--sandbox", "on",
                    "--gate", PYTEST_GATE], own_dir, server, no_userns=True)
    assert on.returncode == 5, on.stderr
    lines = [line for line in on.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("prime-ci: error: --sandbox on"), lines
    assert "user namespaces are refused here" in lines[0]
    assert len(server.chat_requests) == asked
