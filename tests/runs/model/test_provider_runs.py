"""Issue 15: real providers at real prices, through the CLI against scripted servers speaking both APIs.

The Anthropic route goes through litellm's real Messages transformation to the scripted server's
``/v1/messages``; the server simulates Anthropic's prompt cache (breakpoints, 20-block lookback), so the cache
numbers below are what the client's breakpoint placement earns.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Outcome, run_inproc
from prime_ci.testing import ScriptedServer, contains, hang, ipython, reply, tool_call

SONNET = "anthropic/claude-sonnet-4-5"
ANTHROPIC = {"ANTHROPIC_API_KEY": "sk-ant-test"}


def anthropic_run(tmp_path: Path, repo: Path, srv: ScriptedServer, *extra: str) -> Outcome:
    return run_inproc(tmp_path, repo, srv, "--model", SONNET, "--api-base", srv.root_url, *extra, env=ANTHROPIC)


def assistant_usages(run: Outcome) -> list[dict[str, Any]]:
    return [e["message"]["usage"] for e in run.session()
            if e.get("type") == "message" and e["message"]["role"] == "assistant"]


def litellm_costs(model: str, usages: list[dict[str, Any]]) -> list[float]:
    """litellm's own cost function over each recorded reply, in a fresh interpreter."""
    probe = (
        "import json, os, sys\n"
        "os.environ['LITELLM_LOCAL_MODEL_COST_MAP'] = 'True'\n"
        "import litellm\n"
        "out = []\n"
        "for u in json.loads(sys.argv[2]):\n"
        "    prompt = u['input'] + u['cacheRead'] + u['cacheWrite']\n"
        "    usage = litellm.Usage(prompt_tokens=prompt, completion_tokens=u['output'],\n"
        "        total_tokens=prompt + u['output'], prompt_tokens_details={'cached_tokens': u['cacheRead']},\n"
        "        cache_read_input_tokens=u['cacheRead'], cache_creation_input_tokens=u['cacheWrite'])\n"
        "    p, c = litellm.cost_per_token(model=sys.argv[1], usage_object=usage)\n"
        "    out.append(p + c)\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, model, json.dumps(usages)], capture_output=True, text=True,
                          timeout=120, check=True)
    costs: list[float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return costs


def marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


def breakpoints(body: dict[str, Any]) -> tuple[bool, int, int]:
    """(system marked, index of the last marked message, number of breakpoints) of a Messages request."""
    system = body.get("system")
    system_marked = any(marked(b) for b in system) if isinstance(system, list) else False
    last, count = -1, sum(marked(b) for b in system) if isinstance(system, list) else 0
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        blocks = content if isinstance(content, list) else []
        inner = [c for b in blocks if isinstance(b, dict) and isinstance(b.get("content"), list) for c in b["content"]]
        hits = sum(marked(b) for b in blocks) + sum(marked(b) for b in inner) + marked(message)
        if hits:
            last, count = i, count + hits
    count += sum(marked(t) for t in body.get("tools") or [])
    return system_marked, last, count


TURNS = [ipython(f"x{i} = {i} * 2\nprint(x{i})") for i in range(19)] + [reply("done")]


def test_anthropic_route_caches_the_prefix_and_prices_it_with_litellm(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer(TURNS) as srv:
        run = anthropic_run(tmp_path, buggy_repo, srv)
        requests = srv.chat_requests
    assert run.code == 0, run.proc.stderr
    assert len(requests) == 20 and all(r.path == "/v1/messages" for r in requests)
    for r in requests[1:]:
        system_marked, last, count = breakpoints(r.body)
        assert system_marked and last == len(r.body["messages"]) - 1 and count <= 4, (system_marked, last, count)
    usages = assistant_usages(run)
    assert all(u["cacheRead"] > 0 for u in usages[1:]), [u["cacheRead"] for u in usages]
    total = run.result["usage"]
    assert total["cache_read_tokens"] == sum(u["cacheRead"] for u in usages) > 0
    assert total["cache_write_tokens"] == sum(u["cacheWrite"] for u in usages) > 0
    costs = litellm_costs(SONNET, usages)
    assert run.result["usage"]["cost_usd"] == pytest.approx(sum(costs), abs=1e-9)
    for usage, cost in zip(usages, costs, strict=True):  # the session's split adds up to litellm's figure
        split = usage["cost"]
        assert split["total"] == pytest.approx(cost, abs=1e-12)
        assert split["input"] + split["output"] + split["cacheRead"] + split["cacheWrite"] == pytest.approx(cost)
    uncached = sum((u["input"] + u["cacheRead"] + u["cacheWrite"]) * 3e-6 + u["output"] * 15e-6 for u in usages)
    assert run.result["usage"]["cost_usd"] < 0.5 * uncached

    limit = sum(costs[:8])
    with ScriptedServer(TURNS) as srv:
        capped = anthropic_run(tmp_path, buggy_repo, srv, "--max-cost", f"{limit:.9f}")
    assert capped.result["stop_reason"] == "max_cost", capped.proc.stderr
    assert 0 < capped.result["usage"]["cost_usd"] <= limit
    assert capped.result["usage"]["turns"] < 20


def test_no_cache_sends_no_breakpoints(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer([*TURNS[:3], reply("done")]) as srv:
        run = anthropic_run(tmp_path, buggy_repo, srv, "--no-cache")
        requests = srv.chat_requests
    assert run.code == 0, run.proc.stderr
    assert all(breakpoints(r.body)[2] == 0 for r in requests)
    assert run.result["usage"]["cache_read_tokens"] == 0


def test_direct_route_records_cached_tokens_at_the_cached_rate(tmp_path: Path, buggy_repo: Path) -> None:
    usage = {"prompt_tokens": 2000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 1536}}
    steps = [reply(None, [tool_call("ipython", {"code": "print(1)"})], usage=usage), reply("done", usage=usage)]
    with ScriptedServer(steps) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--model", "openai/gpt-4o-mini")
    assert run.code == 0, run.proc.stderr
    got = run.result["usage"]
    assert got["cache_read_tokens"] == 2 * 1536 and got["prompt_tokens"] == 4000
    # gpt-4o-mini in litellm's table: $0.15/M input, $0.075/M cached input, $0.60/M output
    expected = 2 * ((2000 - 1536) * 0.15e-6 + 1536 * 0.075e-6 + 10 * 0.6e-6)
    assert got["cost_usd"] == pytest.approx(expected, abs=1e-12)
    first = assistant_usages(run)[0]
    assert first["input"] == 464 and first["cacheRead"] == 1536 and first["cacheWrite"] == 0
    assert first["cost"]["cacheRead"] == pytest.approx(1536 * 0.075e-6)
    assert set(first["cost"]) == {"input", "output", "cacheRead", "cacheWrite", "total"}


def test_reasoning_effort_reaches_the_provider_and_thinking_is_logged(tmp_path: Path, buggy_repo: Path) -> None:
    steps = [ipython("print(2)", reasoning="The test adds; check calc first."), reply("done")]
    with ScriptedServer(steps) as srv:
        run = anthropic_run(tmp_path, buggy_repo, srv, "--reasoning-effort", "high")
        requests = srv.chat_requests
    assert run.code == 0, run.proc.stderr
    thinking = requests[0].body.get("thinking")
    assert thinking and thinking["type"] == "enabled" and thinking["budget_tokens"] > 0, requests[0].body
    assert requests[0].body["max_tokens"] > thinking["budget_tokens"]
    # the signed thinking block goes back with the tool result, as Anthropic requires
    sent_back = [b for m in requests[1].body["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert any(b.get("type") == "thinking" and b.get("signature") for b in sent_back), sent_back
    parts = [p for e in run.session() if e.get("type") == "message" and e["message"]["role"] == "assistant"
             for p in e["message"]["content"]]
    assert {"type": "thinking", "thinking": "The test adds; check calc first."} in parts
    shown = subprocess.run([str(Path(sys.executable).parent / "prime-ci"), "show", str(run.out / "session.jsonl")],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "150"})
    assert "thinking" in shown.stdout and "The test adds; check calc first." in shown.stdout

    with ScriptedServer([ipython("print(3)", reasoning="plan"), reply("done")]) as srv:
        direct = run_inproc(tmp_path, buggy_repo, srv, "--reasoning-effort", "low")
        body = srv.chat_requests[0].body
        second = srv.chat_requests[1].body
    assert direct.code == 0 and body["reasoning_effort"] == "low"
    assert all("reasoning_content" not in m for m in second["messages"])  # never fed back on this route
    assert direct.result["usage"]["reasoning_tokens"] > 0


def test_a_reply_cut_off_inside_a_tool_call_is_reported_as_truncated(tmp_path: Path, buggy_repo: Path) -> None:
    cut = reply(None, [tool_call("ipython", '{"code": "open(\'big.py\', \'w\').write(\'\'\'\\nline 1\\nline')],
                finish_reason="length")
    with ScriptedServer([cut, reply("done")]) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv)
        second = srv.chat_requests[1].body["messages"]
    assert run.code == 0, run.proc.stderr
    told = second[-1]
    assert told["role"] == "tool" and "cut off at the completion token limit" in told["content"], told
    assert "not valid JSON" not in told["content"]


ROUTES = [("direct", "openai/scripted", {}), ("litellm", "openai/scripted", {"PRIME_CI_ROUTE": "litellm"}),
          ("hosted_vllm", "hosted_vllm/scripted", {})]


@pytest.mark.parametrize(("route", "model", "env"), ROUTES, ids=[r[0] for r in ROUTES])
def test_a_strict_server_takes_a_ten_turn_tool_run(tmp_path: Path, buggy_repo: Path, route: str, model: str,
                                                   env: dict[str, str]) -> None:
    steps = [ipython(f"print({i})") for i in range(9)] + [reply("done")]
    with ScriptedServer(steps, strict=True) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--model", model, env=env)
        rejected = srv.rejected
        requests = srv.chat_requests
    assert run.code == 0, run.proc.stderr
    assert not rejected, [r.rejected for r in rejected]
    assert len(requests) == 10
    assistants = [m for m in requests[-1].body["messages"] if m["role"] == "assistant"]
    assert len(assistants) == 9 and all(m.get("content") == "" for m in assistants)


def test_a_small_window_is_discovered_and_overflow_compacts(tmp_path: Path, buggy_repo: Path) -> None:
    big = "y = 'word ' * 150\nprint(y)"  # each result ~750 chars: the 2,048-token window overflows in a few turns
    steps = [ipython(big) for _ in range(10)] + [reply("done")]
    with ScriptedServer(steps, context_window=2048) as srv:
        srv.route(contains("compacting the working context"), [reply("summary: printed words")] * 20)
        run = run_inproc(tmp_path, buggy_repo, srv, "--model", "openai/scripted-model", "--max-completion-tokens",
                        "256")
        rejected = srv.rejected
        models = [r for r in srv.requests if r.path.endswith("/models")]
        compactions = [r for r in srv.chat_requests if "compacting the working context" in json.dumps(r.body)]
    assert run.code == 0, run.proc.stderr
    assert models and "context window 2048 tokens (the server's /models)" in run.proc.stderr
    assert compactions and not [r for r in rejected if r in compactions]
    assert any(e.get("type") == "compaction" for e in run.session())
    assert run.result["usage"]["turns"] == 11


def test_overflow_the_client_did_not_foresee_triggers_compaction_and_a_retry(tmp_path: Path,
                                                                             buggy_repo: Path) -> None:
    big = "y = 'word ' * 150\nprint(y)"
    steps = [ipython(big) for _ in range(8)] + [reply("done")]
    with ScriptedServer(steps, context_window=2048) as srv:
        srv.route(contains("compacting the working context"), [reply("summary: printed words")] * 20)
        # the client is told a large window: only the server's 400 says otherwise
        run = run_inproc(tmp_path, buggy_repo, srv, "--context-window", "100000", "--max-completion-tokens", "256")
        rejected = srv.rejected
    assert run.code == 0, run.proc.stderr
    assert rejected and "maximum context length" in (rejected[0].rejected or "")
    assert "compacting to fit 2048" in run.proc.stderr
    assert any(e.get("type") == "compaction" for e in run.session())
    assert run.result["usage"]["turns"] == 9  # the refused call was tried again, not counted twice


def test_max_cost_without_a_known_price_is_refused(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer([reply("done")]) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--max-cost", "0.5")
        assert srv.chat_requests == []
    assert run.code == 2 and "--price-per-mtok" in run.proc.stderr, run.proc.stderr
    assert not run.out.exists()

    steps = [ipython("print(1)") for _ in range(30)]
    with ScriptedServer(steps) as srv:
        priced = run_inproc(tmp_path, buggy_repo, srv, "--max-cost", "0.01", "--price-per-mtok", "0.5,1")
    assert priced.result["stop_reason"] == "max_cost", priced.proc.stderr
    usage = priced.result["usage"]
    assert 0 < usage["cost_usd"] <= 0.01 and 0 < usage["turns"] < 30
    assert usage["cost_usd"] == pytest.approx((usage["prompt_tokens"] * 0.5 + usage["completion_tokens"]) / 1e6)


def test_a_call_abandoned_at_the_wall_limit_is_charged_its_estimate(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer([ipython("print(1)"), hang(120)]) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--max-wall", "12s")
        second = srv.chat_requests[1]
    assert run.result["stop_reason"] == "max_wall", run.proc.stderr
    usage = run.result["usage"]
    assert usage["abandoned_calls"] == 1 and usage["turns"] == 2
    first_prompt = next(e["data"]["prompt_tokens"] for e in run.session()
                        if e.get("type") == "custom" and e.get("customType") == "prime_ci.usage")
    # the hung call's prompt, estimated high (chars/3 against the server's chars/4)
    assert usage["prompt_tokens"] - first_prompt >= math.ceil(len(second.raw) / 4)


def test_every_request_extends_the_last_one_so_automatic_caches_hit(tmp_path: Path, buggy_repo: Path) -> None:
    steps = [ipython(f"print('{i}' * 300)") for i in range(6)] + [reply("done")]
    with ScriptedServer(steps, auto_cache=True, min_cache_tokens=128) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--model", "openai/gpt-4o-mini")
        bodies = [r.body for r in srv.chat_requests]
    assert run.code == 0, run.proc.stderr
    for before, after in itertools.pairwise(bodies):
        assert after["messages"][: len(before["messages"])] == before["messages"]  # nothing earlier rewritten
        assert after["tools"] == before["tools"]
    usages = assistant_usages(run)
    assert all(u["cacheRead"] > 0 for u in usages[1:]), [u["cacheRead"] for u in usages]
    assert run.result["usage"]["cache_read_tokens"] == sum(u["cacheRead"] for u in usages)
    assert "read from the prompt cache" in (run.out / "summary.md").read_text()


def test_the_completion_cap_comes_from_the_table_and_is_said_when_lowered(tmp_path: Path,
                                                                         buggy_repo: Path) -> None:
    from prime_ci.model.routes import NON_STREAMED_COMPLETION_CAP, LiteLLMModel, completion_limit

    assert completion_limit(LiteLLMModel("openai/gpt-4o-mini"), None) == (16384, None)  # its max_output_tokens
    capped, note = completion_limit(LiteLLMModel(SONNET), None)  # 64,000 in the table
    assert capped == NON_STREAMED_COMPLETION_CAP and note and "64000" in note
    assert completion_limit(LiteLLMModel(SONNET), 4000) == (4000, None)
    with ScriptedServer([reply("done")]) as srv:
        run = anthropic_run(tmp_path, buggy_repo, srv)
        sent = srv.chat_requests[0].body["max_tokens"]
    assert run.code == 0 and sent == NON_STREAMED_COMPLETION_CAP
    assert "capped at 21333 (of 64000)" in run.proc.stderr


def test_an_allowance_past_an_undiscovered_window_is_asked_again_smaller(tmp_path: Path, buggy_repo: Path) -> None:
    # a llama.cpp-like server whose /models does not name the requested model: the window is unknown (128k)
    # until the first 400 says 8192; 8192 completion tokens on top of the prompt do not fit
    with ScriptedServer([ipython("print(1)"), reply("done")], context_window=8192, strict=True) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--model", "openai/gemma")
        rejected, requests = srv.rejected, srv.chat_requests
    assert run.code == 0, run.proc.stderr
    assert len(rejected) == 1 and "asking for less completion to fit 8192" in run.proc.stderr
    accepted = [r for r in requests if r.rejected is None]
    assert len(accepted) == 2 and all(r.body["max_tokens"] < 8192 for r in accepted)
    assert not any(e.get("type") == "compaction" for e in run.session())


def test_usage_is_read_alike_from_a_json_body_and_from_litellms_object() -> None:
    from prime_ci.model import providers, routes
    from prime_ci.model.usage import Usage, usage_from

    openai = {"prompt_tokens": 900, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 512},
              "completion_tokens_details": {"reasoning_tokens": 25}, "cache_creation_input_tokens": 128}
    anthropic = {**openai, "prompt_tokens_details": None, "cache_read_input_tokens": 512}
    expected = Usage(900, 40, cache_read_tokens=512, cache_write_tokens=128, reasoning_tokens=25)
    litellm = routes.litellm_module()
    for body in (openai, anthropic):
        assert usage_from(body) == expected
        assert usage_from(litellm.Usage(**{k: v for k, v in body.items() if v is not None})) == expected
    assert usage_from(None) == usage_from({}) == usage_from([]) == Usage()
    assert routes._pricer("openai/my-local-model", None) is providers.unpriced  # one pricer for an unknown price
