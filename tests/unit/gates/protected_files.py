"""Files whose pytest sections and workflows are protected."""

from __future__ import annotations

FILES = {
    "pyproject.toml": '[project]\nname = "calc"\nversion = "1.0"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n',
    "setup.cfg": "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -q\n",
    "tox.ini": "[tox]\nenvlist = py311\n\n[pytest]\naddopts = -q\n",
    ".github/workflows/ci.yml": "on: push\n",
    ".github/workflows/nested/reusable.yml": "on: workflow_call\n",
}
