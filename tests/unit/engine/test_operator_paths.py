"""A relative path the operator gives means the working directory, everywhere (DESIGN §14; issue 39): a relative
``--gates-file`` was looked up in the hidden worktree, ``--sandbox-ro`` too, while ``--config`` paths were relative
to the working directory. The repository's own settings stay relative to the worktree; a gate file named that way
inside REPO is still a protected path; read at ``--gates-from`` it is a path in REPO at that commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import BUGGY, cli_inproc, make_repo
from prime_ci.engine.prepare import Prepared, prepare
from prime_ci.errors import ConfigError
from prime_ci.gates import protect


def gate(name: str) -> str:
    return f'[[gate]]\nname = "{name}"\ncommand = "true"\n'


def _prepare(repo: Path, **flags: Any) -> Prepared:
    return prepare({"repo": str(repo), "task": "t", "model": "openai/x", "api_base": "http://127.0.0.1:9/v1",
                    "sandbox": "off", **flags}, [].append)


def test_relative_paths_from_the_operator_mean_the_working_directory(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "gates.toml": gate("from-repo"), "ro/x": "x"})
    cwd = tmp_path / "cwd"
    (cwd / "ro").mkdir(parents=True)
    (cwd / "gates.toml").write_text(gate("from-cwd"))
    monkeypatch.chdir(cwd)
    prep = _prepare(repo, gates_file=["gates.toml"], sandbox_ro=["ro"])
    prep.worktree.remove()
    assert [g.name for g in prep.gates] == ["from-cwd"]
    assert str(cwd / "ro") in prep.reach and not any(p.endswith("/work/ro") for p in prep.reach)
    with pytest.raises(ConfigError, match="not in REPO"):
        _prepare(repo, gates_file=["gates.toml"], gates_from="HEAD")

    monkeypatch.chdir(repo)  # the usual case: the operator's gate file is REPO's, and stays protected
    prep = _prepare(repo, gates_file=["gates.toml"])
    try:
        assert [g.name for g in prep.gates] == ["from-repo"]
        assert protect.check(prep.worktree, ["gates.toml"], prep.cfg.gates_file, [], []).protected == ["gates.toml"]
    finally:
        prep.worktree.remove()
    prep = _prepare(repo, gates_file=["./gates.toml"], gates_from="HEAD")
    prep.worktree.remove()
    assert prep.cfg.gates_file == ["gates.toml"] and [g.name for g in prep.gates] == ["from-repo"]

    help_text = " ".join(cli_inproc(["run", "--help"], cwd=tmp_path).stdout.split())
    assert "A relative path, on the command line or in a --config file, is relative to the working directory" \
        in help_text
