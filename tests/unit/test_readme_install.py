"""The README's opening says which Python prime-ci needs (pyproject's ``requires-python``) and how to install the
command apart from any project's environment, in one line (issue 39)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_opening_states_the_python_and_an_isolated_install() -> None:
    needed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    opening = (ROOT / "README.md").read_text(encoding="utf-8").split("\n---\n")[0]
    assert f"Python ≥ {needed.removeprefix('>=')}" in opening, needed
    installs = [line for line in opening.splitlines() if re.match(r"(uv tool|pipx) install ", line)]
    assert installs and all("requirements.lock" in line for line in installs), installs
