"""Issue 40, acceptance 4b: against the scripted server answering like llama.cpp on a 2,048-token window, no
compaction before turn 1 (the first estimate is the server's own count, asked with ``/apply-template`` and
``/tokenize``), and ``resume`` of a run that ended ``model_error`` because the server died continues once a server
answers again. A window too small for the system prompt is one line and exit 2, before anything starts."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from conftest import BUGGY, FIX, PYTEST_GATE, cli_inproc, make_repo, run_inproc
from prime_ci.model.usage import MARGIN
from prime_ci.testing import ScriptedServer, hang, ipython, reply
from prime_ci.testing.llama_api import prompt_tokens

WINDOW = 2048
MODEL = ("--model", "openai/scripted-model")  # the id the server's /models lists, with its n_ctx


def llama(*steps: object, port: int = 0) -> ScriptedServer:
    return ScriptedServer(list(steps), strict=True, context_window=WINDOW, port=port)  # type: ignore[arg-type]


def compactions(out: Path) -> list[dict[str, object]]:
    entries = [json.loads(line) for line in (out / "session.jsonl").read_text().splitlines()]
    return [e for e in entries if e.get("type") == "compaction"]


def test_no_compaction_before_turn_1_the_first_estimate_is_the_servers_count(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    with llama(ipython(FIX), reply("Fixed.")) as srv:
        run = run_inproc(tmp_path, repo, srv, *MODEL, "--sandbox", "off", "--gate", PYTEST_GATE)
        kinds = [r.step_kind for r in srv.requests]
        first = srv.chat_requests[0]
    assert run.code == 0, run.proc.stderr
    assert run.result["context_window"] == WINDOW and compactions(run.out) == []
    counted = re.search(r"first estimate ~(\d+) tokens: the server counts (\d+) in the system prompt and the task "
                        r"\(/apply-template \+ /tokenize\)", run.proc.stderr)
    assert counted is not None, run.proc.stderr
    estimate, count = int(counted[1]), int(counted[2])
    assert count == prompt_tokens(first.body)  # the server's count of the first request it then got
    assert count <= estimate <= count * MARGIN + 1 < 0.8 * WINDOW
    assert first.body["max_tokens"] == WINDOW - estimate  # the room the window has after the prompt
    assert "nothing is compacted before the model's first reply" not in run.proc.stderr
    assert kinds.index("tokenize") < kinds.index("reply")


def test_a_window_too_small_for_the_system_prompt_is_one_line_and_exit_2(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    with ScriptedServer([reply("never asked")], strict=True, context_window=600) as srv:
        run = run_inproc(tmp_path, repo, srv, *MODEL, "--sandbox", "off")
        chats = srv.chat_requests
    assert run.code == 2, run.proc.stderr
    errors = [line for line in run.proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("prime-ci: error: the context window (600 tokens, the server's "
                                                     "/models) leaves no room for a reply: the server counts "), errors
    assert "llama-server -c" in errors[0] and chats == []
    assert not run.out.exists() and "compact" not in run.proc.stderr


def test_resume_of_a_run_the_dead_server_stopped_goes_on_when_it_answers_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    srv = llama(ipython(FIX), hang(3600)).start()
    port = srv.port

    def die_while_answering() -> None:  # the second call's server goes away mid-answer, and stays away
        srv.wait_for_requests(2, timeout=120, chat=True)
        srv.close()

    killer = threading.Thread(target=die_while_answering)
    killer.start()
    try:
        first = run_inproc(tmp_path, repo, srv, *MODEL, "--sandbox", "off", "--gate", PYTEST_GATE)
    finally:
        killer.join()
        srv.close()
    assert first.code == 4 and first.result["stop_reason"] == "model_error", first.proc.stderr
    assert "connection refused" in first.result["detail"]
    assert compactions(first.out) == []

    with llama(reply("The fix is in place."), port=port) as again:
        resumed = cli_inproc(["resume", str(first.out)], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test-canary"})
        kinds = [r.step_kind for r in again.requests]
        asked = again.chat_requests
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads((first.out / "result.json").read_text())
    assert result["stop_reason"] == "completed" and result["gates"][-1]["passed"]
    assert compactions(first.out) == [] and len(asked) == 1 and asked[0].rejected is None
    sent = json.dumps(asked[0].body["messages"])
    assert "a + b" in sent and "patch, as it was when the run stopped" in sent  # from its last entry
    assert kinds.index("apply-template") < kinds.index("tokenize") < kinds.index("reply")  # counted before the call
