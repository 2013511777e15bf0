"""Issue 2 acceptance 3, 4, 5: gate retries, budgets (turns, tokens, wall clock) and provider failures.

Everything goes through the installed CLI against the scripted provider on loopback; no mocks.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG, PYTEST_GATE, Outcome, load_factor, run_inproc
from prime_ci.testing import ScriptedServer, error, ipython, reply

CANARY = "sk-test-canary"  # the OPENAI_API_KEY run_inproc gives prime-ci
# pytest fails on test_add, then 3 MB more output on one line, and the gate exits 1 whatever pytest said.
NOISY_GATE = PYTEST_GATE + "; python -c \"print('x' * 3_000_000)\"; exit 1"
GROWTH_LIMIT = 8 * 1024


def customs(run: Outcome, custom_type: str) -> list[dict[str, Any]]:
    return [e for e in run.session() if e.get("type") == "custom" and e.get("customType") == custom_type]


def assert_stopped(run: Outcome, code: int, reason: str) -> None:
    """Exit code, result.json, summary.md and the session's closing `prime_ci.stop` entry agree."""
    assert run.code == code, run.proc.stderr
    assert "Traceback" not in run.proc.stderr
    result = run.result
    assert result["stop_reason"] == reason and result["exit_code"] == code and result["success"] is (code == 0)
    assert reason in (run.out / "summary.md").read_text()
    last = run.session()[-1]
    assert last["type"] == "custom" and last["customType"] == "prime_ci.stop", last
    assert last["data"]["stop_reason"] == reason and last["data"]["exit_code"] == code


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


# --- acceptance 3: gate feedback and --max-gate-retries ---------------------------------------------------------


def test_gate_feedback_names_the_failing_test_bounded_and_retries_run_out(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    # The model never fixes add(), but touches a new file every turn so the gates really rerun each round.
    for i in range(3):
        server.add(ipython(f"open('scratch_{i}.txt', 'w').write('round {i}\\n')"), reply("I think it is fine now."))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", NOISY_GATE, "--max-gate-retries", "2")
    assert_stopped(run, 1, "gates_failed")

    # N = 2 failed rounds fed back, the third failure stops: 3 turns of (cell, end of turn) = 6 model calls.
    requests = server.chat_requests
    assert len(requests) == 6, [r.step_kind for r in requests]
    assert server.exhausted == 0
    assert run.result["usage"]["model_calls"] == 6
    rounds = customs(run, "prime_ci.gate")
    ran = [r for r in rounds if "skipped" not in r["data"]]
    assert len(ran) == 3 and len(rounds) == 3, [r["data"] for r in rounds]
    for entry in ran:
        assert [g["passed"] for g in entry["data"]["results"]] == [False]

    # After each end of turn the next request carries the feedback naming test_add, and stays small
    # although the gate printed megabytes.
    for after_end in (2, 4):
        body = requests[after_end].body
        feedback = message_text(body["messages"][-1])
        assert body["messages"][-1]["role"] == "user"
        assert "test_add" in feedback, feedback[:2000]
        growth = len(requests[after_end].raw) - len(requests[after_end - 1].raw)
        assert growth <= GROWTH_LIMIT, f"request {after_end} grew by {growth} bytes"
    assert max(len(r.raw) for r in requests) < 100_000

    assert [g["passed"] for g in run.result["gates"]] == [False]
    assert sorted(run.result["changed_files"]) == ["scratch_0.txt", "scratch_1.txt", "scratch_2.txt"]
    log = next((run.out / "gates").glob("*.log")).read_text()
    assert "test_add" in log and len(log) > 3_000_000, "the full gate output belongs in the log"


def test_unchanged_workspace_rounds_count_without_rerunning_gates(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.add(reply("done"), reply("still done"), reply("really done"), reply("one too many"))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", PYTEST_GATE, "--max-gate-retries", "1")
    assert_stopped(run, 1, "gates_failed")
    # Round 1 runs and fails (fed back), round 2 is skipped as unchanged but still counts: the run stops.
    assert len(server.chat_requests) == 2
    rounds = customs(run, "prime_ci.gate")
    assert [("skipped" in r["data"]) for r in rounds] == [False, True], [r["data"] for r in rounds]
    assert "test_add" in message_text(server.chat_requests[1].body["messages"][-1])


# --- acceptance 4: budgets ------------------------------------------------------------------------------------


def test_max_turns_stops_after_exactly_that_many_model_calls(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer(default=ipython("print('working')")) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--max-turns", "3", "--gate", PYTEST_GATE)
        assert_stopped(run, 3, "max_turns")
        assert len(srv.chat_requests) == 3
    usage = run.result["usage"]
    assert usage["turns"] == 3 and usage["model_calls"] == 3
    assert run.result["budgets"]["max_turns"] == 3
    for name in ("result.json", "summary.md", "session.jsonl", "patch.diff", "junit.xml"):
        assert (run.out / name).is_file(), name


TOKEN_BUDGET = 4000
# A tool call whose arguments are far longer than any completion allowance: the scripted server caps its
# completion_tokens at the request's max_tokens, so this call spends everything prime-ci allowed it.
GREEDY = ipython("print('greedy')\n# " + "z" * 40_000)


def _token_budget_run(tmp_path: Path, repo: Path, srv: ScriptedServer) -> Outcome:
    srv.add(ipython("print('y' * 600)"))  # then GREEDY (the default) until the budget runs out
    run = run_inproc(tmp_path, repo, srv, "--max-tokens", str(TOKEN_BUDGET))
    assert_stopped(run, 3, "max_tokens")
    usage = run.result["usage"]
    requests = srv.chat_requests
    assert len(requests) >= 2, "the budget should allow a few calls before it runs out"
    assert usage["model_calls"] == len(requests)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert run.result["budgets"]["max_tokens"] == TOKEN_BUDGET
    for r in requests:  # every call was clamped to what the budget had left
        limit = r.body.get("max_completion_tokens") or r.body.get("max_tokens")
        assert isinstance(limit, int) and 0 < limit < TOKEN_BUDGET, r.body.keys()
    return run


def test_max_tokens_is_never_exceeded_when_the_estimate_holds(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer(default=GREEDY) as srv:
        run = _token_budget_run(tmp_path, buggy_repo, srv)
    usage = run.result["usage"]
    assert 0 < usage["total_tokens"] <= TOKEN_BUDGET, usage


def test_max_tokens_overshoot_is_bounded_when_the_provider_counts_more(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer(default=GREEDY, usage_scale=1.5) as srv:
        run = _token_budget_run(tmp_path, buggy_repo, srv)
        last = srv.chat_requests[-1].body
    usage = run.result["usage"]
    # Documented bound: budget + (last call's actual prompt tokens - prime-ci's ceil(chars/3) estimate).
    chars = len(json.dumps(last["messages"]) + json.dumps(last["tools"]))
    actual_last, estimate_last = round(math.ceil(chars / 4) * 1.5), math.ceil(chars / 3)
    documented = TOKEN_BUDGET + max(0, actual_last - estimate_last) + 64  # slack: serialization differences
    assert usage["total_tokens"] <= min(documented, TOKEN_BUDGET * 1.5), (usage, actual_last, estimate_last)


def test_max_wall_interrupts_a_sleeping_cell(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(ipython(HANG))
    run = run_inproc(tmp_path, buggy_repo, server, "--max-wall", "15s", "--cell-timeout", "10m",
                    "--gate", PYTEST_GATE)
    assert_stopped(run, 3, "max_wall")
    # the run's own clock, not the test's: a loaded machine slows the start-up, not the guard
    assert run.result["wall_s"] < 15 + 5 * load_factor(), run.result["wall_s"]
    assert len(server.chat_requests) == 1
    assert run.result["budgets"]["max_wall_s"] == 15
    for name in ("result.json", "summary.md", "session.jsonl", "patch.diff", "junit.xml"):
        assert (run.out / name).is_file(), name


def test_max_wall_stops_a_gate_that_would_outlive_it(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    # Nothing inside the run bounds a gate by the wall clock: only the outer --max-wall guard can stop it.
    server.add(reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--max-wall", "10s", "--gate", "sleep 45", "--sandbox", "off")
    assert_stopped(run, 3, "max_wall")
    assert run.result["wall_s"] < 10 + 5 * load_factor(), run.result["wall_s"]  # the gate alone would take 45
    assert len(server.chat_requests) == 1


# --- acceptance 5: provider failures --------------------------------------------------------------------------


ROUTES = pytest.mark.parametrize("route", ["direct", "litellm"])


@ROUTES
def test_provider_500_forever_is_a_bounded_model_error(tmp_path: Path, buggy_repo: Path, route: str) -> None:
    with ScriptedServer(default=error(500, "upstream exploded")) as srv:
        started = time.monotonic()
        run = run_inproc(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
        elapsed = time.monotonic() - started
        requests = srv.chat_requests
    assert elapsed < 120, f"took {elapsed:.0f}s"
    assert_stopped(run, 4, "model_error")
    assert 1 <= len(requests) <= 4, len(requests)


def _assert_no_canary(run: Outcome) -> None:
    assert CANARY not in run.proc.stdout and CANARY not in run.proc.stderr
    files = [p for p in run.out.rglob("*") if p.is_file()]
    assert files, "no artifacts written"
    for path in files:
        assert CANARY.encode() not in path.read_bytes(), f"API key leaked into {path}"


@ROUTES
def test_provider_401_stops_after_one_request_without_leaking_the_key(
    tmp_path: Path, buggy_repo: Path, route: str
) -> None:
    with ScriptedServer(default=error(401, "Incorrect API key provided.")) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
        requests = srv.chat_requests
    assert_stopped(run, 4, "model_error")
    assert len(requests) == 1
    assert requests[0].headers.get("authorization") == f"Bearer {CANARY}", "the canary key was not in use"
    _assert_no_canary(run)


@ROUTES
def test_key_echoed_by_the_provider_does_not_leak(tmp_path: Path, buggy_repo: Path, route: str) -> None:
    # Some providers quote the rejected key back in the error body.
    with ScriptedServer(default=error(401, f"Incorrect API key provided: {CANARY}.")) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
        assert len(srv.chat_requests) == 1
    assert_stopped(run, 4, "model_error")
    _assert_no_canary(run)


@ROUTES
def test_429_with_retry_after_is_retried_then_succeeds(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer, route: str
) -> None:
    server.add(error(429, "slow down", retry_after=1, times=2), reply("All good, nothing to do."))
    run = run_inproc(tmp_path, buggy_repo, server, env={"PRIME_CI_ROUTE": route})
    assert_stopped(run, 0, "completed")
    requests = server.chat_requests
    assert [r.step_kind for r in requests] == ["error", "error", "reply"]
    for before, after in itertools.pairwise(requests):
        assert after.t - before.t >= 0.9, "Retry-After: 1 was not honoured"
    usage = run.result["usage"]
    assert usage["model_calls"] == 1 and usage["turns"] == 1
