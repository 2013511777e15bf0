"""``--api-base`` must be an http(s) URL (DESIGN §14): without its scheme it is exit 2 in one line, before anything is
cloned (it used to clone, retry four times and exit 4), whether it comes from the flag, the environment or
``--config``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import BUGGY, cli_inproc, make_repo


def test_an_api_base_without_its_scheme_is_a_usage_error_before_the_clone(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import prime_ci.engine.prepare

    def cloned(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("REPO was cloned")

    monkeypatch.setattr(prime_ci.engine.prepare, "create_worktree", cloned)
    repo = make_repo(tmp_path / "repo", BUGGY)
    (tmp_path / "operator.toml").write_text('api-base = "localhost:8080/v1"\n')
    run = ["run", str(repo), "--task", "t", "--model", "openai/x"]
    for extra, env in ((["--api-base", "localhost:8080"], {}), ([], {"PRIME_CI_API_BASE": "localhost:8080"}),
                       (["--config", "operator.toml"], {}), (["--api-base", "ftp://host/v1"], {})):
        proc = cli_inproc([*run, *extra], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test", **env})
        assert proc.returncode == 2, (extra, env, proc.stderr)
        assert "expected an http:// or https:// URL" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "prime-ci-out").exists()
