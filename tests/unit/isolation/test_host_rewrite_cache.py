"""pytest rewrites the assertions of every plugin module (whole plugin distributions) and caches the result in a
``__pycache__`` of its own, found through the pycache prefix when one is set: so a gate, whose prefix starts
empty, rewrote hypothesis, anyio and the like in each process. The start-up hook gives pytest's rewriter the same
rule as the interpreter's loaders: the cache beside a source under a trusted root, the prefix for the rest."""

from __future__ import annotations

import importlib.util
import marshal
import os
import subprocess
from pathlib import Path

import pytest

from unit.isolation.layered_env import env_python, trust

PLUGIN = "def pytest_configure(config):\n    assert config is not None\n"
TEST = "def test_one():\n    assert 1\n"
MARKER = "REWRITTEN-BY-THE-HOST"


def run_pytest(python: Path, work: Path, plugin_dir: Path, prefix: Path | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(plugin_dir), "PYTHONDONTWRITEBYTECODE": "1"}
    if prefix is not None:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    return subprocess.run([str(python), "-m", "pytest", "-q", "-s", "-p", "plug", "-p", "no:cacheprovider",
                           "test_one.py"], cwd=work, capture_output=True, text=True, env=env, check=False)


def plant_rewritten(plugin: Path) -> None:
    """What pytest would cache for ``plugin`` had the host run it, except that it also prints MARKER: proof of
    which copy was executed (pytest checks only the source's hash)."""
    tag = importlib.util.cache_from_source(str(plugin)).rsplit(".", 2)[-2]  # cpython-3XY
    pytest_version = pytest.__version__
    code = compile(f"print({MARKER!r})\n" + plugin.read_text(), str(plugin), "exec")
    header = importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00" + importlib.util.source_hash(plugin.read_bytes())
    cache = plugin.parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / f"plug.{tag}-pytest-{pytest_version}.pyc").write_bytes(header + marshal.dumps(code))


def planted_env(tmp_path: Path, plugin_home: Path) -> tuple[Path, Path, Path]:
    python, run = env_python(tmp_path)
    (run / "work" / "test_one.py").write_text(TEST)
    plugin_home.mkdir(parents=True, exist_ok=True)
    (plugin_home / "plug.py").write_text(PLUGIN)
    plant_rewritten(plugin_home / "plug.py")
    return python, run, plugin_home


def test_a_trusted_plugin_is_read_from_the_rewrite_cache_beside_it(tmp_path: Path) -> None:
    python, run, host = planted_env(tmp_path, tmp_path / "host")
    trust(run, host)
    proc = run_pytest(python, run / "work", host, tmp_path / "prefix")
    assert proc.returncode == 0 and MARKER in proc.stdout, proc.stdout + proc.stderr


def test_an_untrusted_plugin_is_rewritten_from_its_source(tmp_path: Path) -> None:
    python, run, host = planted_env(tmp_path, tmp_path / "host")  # not trusted
    proc = run_pytest(python, run / "work", host, tmp_path / "prefix")
    assert proc.returncode == 0 and MARKER not in proc.stdout, proc.stdout + proc.stderr


def test_a_plugin_in_the_run_directory_is_rewritten_from_its_source(tmp_path: Path) -> None:
    """The worktree (and the run's environment) can be written by a gate: a rewrite cache there is never read,
    even through a trusted directory's symlink."""
    python, run, planted = planted_env(tmp_path, tmp_path / "run" / "work" / "plugins")
    host = tmp_path / "host"
    host.mkdir()
    (host / "plug.py").symlink_to(planted / "plug.py")
    (host / "__pycache__").symlink_to(planted / "__pycache__")
    trust(run, host)
    for plugin_dir in (planted, host):
        proc = run_pytest(python, run / "work", plugin_dir, tmp_path / "prefix")
        assert proc.returncode == 0 and MARKER not in proc.stdout, (plugin_dir, proc.stdout + proc.stderr)


def test_the_test_files_keep_the_prefix(tmp_path: Path) -> None:
    python, run, host = planted_env(tmp_path, tmp_path / "host")
    trust(run, host)
    prefix = tmp_path / "prefix"
    proc = subprocess.run([str(python), "-c", "import sys; from pathlib import Path; "
                           "from _pytest.assertion.rewrite import get_cache_dir as g; "
                           "print(g(Path(sys.argv[1]))); print(g(Path(sys.argv[2])))",
                           str(run / "work" / "test_one.py"), str(host / "plug.py")],
                          capture_output=True, text=True, check=True,
                          env={"PATH": os.environ["PATH"], "PYTHONPYCACHEPREFIX": str(prefix)})
    work_dir, host_dir = proc.stdout.split()
    assert Path(work_dir).is_relative_to(prefix) and host_dir == str(host / "__pycache__"), proc.stdout
