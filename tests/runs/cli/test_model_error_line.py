"""Issue 23 item 10 through the CLI: the last line of a run whose server stopped answering, and the window used."""

from __future__ import annotations

from pathlib import Path

from conftest import make_repo, run_inproc
from prime_ci.testing import ScriptedServer, hang, ipython


def test_a_silent_server_ends_the_run_by_the_model_timeout_named_in_the_last_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with ScriptedServer([ipython("print(1)"), *[hang(3600)] * 4], context_window=4096) as srv:
        run = run_inproc(tmp_path, repo, srv, "--model", "openai/scripted-model", "--model-timeout", "1s")
        calls = len(srv.chat_requests)
    assert run.code == 4, run.proc.stderr
    last = run.proc.stderr.strip().splitlines()[-1]
    assert last == (f"prime-ci: model_error: {srv.url}/chat/completions kept failing after 4 attempts: no answer "
                    "since 1s (the connection stayed open) (attempts 1-4)"), run.proc.stderr
    assert calls == 5 and run.result["usage"]["turns"] == 1
    assert run.result["context_window"] == 4096  # what /models advertised, not only on stderr


def test_the_wall_limit_names_the_call_it_cut_short(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with ScriptedServer([hang(3600)]) as srv:
        run = run_inproc(tmp_path, repo, srv, "--max-wall", "12s")
        assert len(srv.chat_requests) == 1
    assert run.result["stop_reason"] == "max_wall", run.proc.stderr
    assert f"a model call to {srv.url}/chat/completions had no answer since" in run.result["detail"]
    assert "--model-timeout is 5m" in run.result["detail"]
