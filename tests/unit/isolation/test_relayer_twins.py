"""Issue 38: after setup made a toolchain's environment, the run's environment is layered on it (projenv.relayer).
The console-script twins written for the job's interpreter then go: layered on the tool's environment, the job's
``tox`` twin ran without the tox package ("No module named 'tox'", the realworld tier's tox case), where the
job's own script, further down PATH, runs as installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prime_ci.isolation import projenv


def venv_with_script(path: Path, script: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    (path / "bin" / script).write_text(f"#!{python}\nimport {script}\n")
    (path / "bin" / script).chmod(0o755)
    return python


def test_relayering_drops_the_old_interpreters_twins_and_twins_the_new_ones(tmp_path: Path) -> None:
    job = venv_with_script(tmp_path / "job", "tox")
    made = venv_with_script(tmp_path / "work" / ".tox" / "py", "pytest")
    env = projenv.create(tmp_path / "env", projenv.probe(str(job)), None)
    assert (env.bin / "tox").read_text() == f"#!{env.python}\nimport tox\n"
    (env.bin / "installed").write_text(f"#!{env.python}\nimport installed\n")  # what setup installed stays
    (env.bin / "pytest-cov").write_text(f"#!{env.python}\nimport tox  # rewritten by setup\n")

    moved = projenv.relayer(env, projenv.probe_made(made.parent.parent))

    assert not (moved.bin / "tox").exists()
    assert (moved.bin / "pytest").read_text() == f"#!{moved.python}\nimport pytest\n"
    assert (moved.bin / "installed").exists() and (moved.bin / "pytest-cov").exists()
    assert (moved.bin / "pip").exists()
