"""Issue 26, Prime Agent parity: what Prime Agent's own session code makes of a run prime-ci exported.

``prime_agent_code`` builds Prime Agent's session manager, sub-agent tree (labels, usage sums) and spawn ledger
(the sub-agent list, seeded from each parent's ``rlm-subagents.jsonl``) from Prime Agent's sources and runs them
under node. The runs are real (``prime-ci run`` with children as processes, compactions, a refinement);
the provider is the scripted server, priced with ``--price-per-mtok`` so that cost is a real figure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import prime_agent_code
from conftest import cli_inproc, run_inproc
from prime_ci.testing import ScriptedServer, contains, ipython, reply, tool_call
from runs.children.child_probes import script_two_generations

PRICE = ["--price-per-mtok", "3,15,0.3"]
SUMMARIZER = "compacting the working context"


@pytest.fixture(autouse=True)
def prime_agent() -> None:
    prime_agent_code.require()


def export(tmp_path: Path, out: Path) -> Path:
    dest = tmp_path / "prime-agent"
    done = cli_inproc(["export", str(out), "--prime-agent", str(dest)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return dest


def header(path: Path) -> dict[str, Any]:
    first: dict[str, Any] = json.loads(path.read_text().splitlines()[0])
    return first


def spent(usage: dict[str, Any]) -> int:
    """Tokens spent as Prime Agent's /context and /usage count them."""
    return int(usage["input"] + usage["output"] + usage["cacheRead"] + usage["cacheWrite"])


def tree_sum(node: dict[str, Any]) -> tuple[int, float]:
    """The /context total: every agent's own usage (descendants excluded), over the whole tree."""
    tokens, cost = spent(node["ownUsage"]), node["ownUsage"]["cost"]["total"]
    for child in node["children"]:
        more = tree_sum(child)
        tokens, cost = tokens + more[0], cost + more[1]
    return tokens, cost


def check_totals(tree: dict[str, Any], result: dict[str, Any]) -> None:
    usage = result["usage"]
    assert usage["cost_usd"] > 0
    assert spent(tree["totalUsage"]) == usage["total_tokens"], "the root's total, descendants included"
    assert tree["totalUsage"]["cost"]["total"] == pytest.approx(usage["cost_usd"], rel=1e-9)
    tokens, cost = tree_sum(tree)
    assert tokens == usage["total_tokens"], "the tree's total of own usage"
    assert cost == pytest.approx(usage["cost_usd"], rel=1e-9)


def test_exported_children_are_listed_labelled_and_their_spend_reaches_the_root(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    script_two_generations(server)
    run = run_inproc(tmp_path, buggy_repo, server, "--max-depth", "2", *PRICE)
    assert run.code == 0, run.proc.stderr
    dest = export(tmp_path, run.out)
    root_file = next((dest / "sessions").glob("*.jsonl"))
    kid_file = next((dest / "session-artifacts" / root_file.stem).glob("sub-*/*.jsonl"))
    gk_file = next(kid_file.parent.glob("sub-*/*.jsonl"))

    # headers point at the exported parents
    assert header(kid_file)["parentSession"] == str(root_file)
    assert header(gk_file)["parentSession"] == str(kid_file)

    # the sub-agent list (Prime Agent's spawn ledger, seeded from the registries export wrote)
    rows = prime_agent_code.read("family", tmp_path / "agent-dir", dest / "sessions")
    by_path = {r["path"]: r for r in rows}
    assert set(by_path) == {str(root_file), str(kid_file), str(gk_file)}
    assert (by_path[str(kid_file)]["name"], by_path[str(kid_file)]["rlmDepth"]) == ("kid", 1)
    assert by_path[str(kid_file)]["parentSessionPath"] == str(root_file)
    assert (by_path[str(gk_file)]["name"], by_path[str(gk_file)]["rlmDepth"]) == ("gk", 2)
    assert by_path[str(gk_file)]["parentSessionPath"] == str(kid_file)
    # the sub-agent list and the /context tree read the tasks as a live Prime Agent child shows its own (the
    # parent's prompt: rlmChildLabel, compactRlmText), without the prefix prime-ci's children were given them with
    assert by_path[str(kid_file)]["firstMessage"] == "child task"
    assert by_path[str(gk_file)]["firstMessage"] == "grand task"
    tree = prime_agent_code.read("tree", root_file)
    [kid] = tree["children"]
    assert kid["label"] == "child task"
    assert [g["label"] for g in kid["children"]] == ["grand task"]
    # totals equal result.json's
    check_totals(tree, run.result)


def test_compaction_and_refinement_spend_is_in_prime_agents_totals(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    compact = ipython("print(await compact.run())")  # at the end of the turn
    steps = [step for i in range(3) for step in (ipython(f"print('step {i}', *range(400))"), compact)]
    server.route(contains(SUMMARIZER), [reply(f"## Goal\nsummary {n}\n## Next Steps\ngo on") for n in range(20)])
    server.route(lambda body: "submit_refinement" in json.dumps(body.get("tools")),
                 [reply(None, [tool_call("submit_refinement", {"rationale": "r", "ops": []})])])
    server.add(*steps, reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--context-window", "6000", "--harness", str(tmp_path / "h"),
                    "--refine", *PRICE)
    assert run.code == 0, run.proc.stderr
    entries = run.session()
    assert sum(e["type"] == "compaction" for e in entries) == 3
    assert sum(contains(SUMMARIZER)(r.body) for r in server.chat_requests) == 3
    assert [e["data"]["refine"] for e in entries if e.get("customType") == "prime_ci.harness"] == ["rejected"]
    dest = export(tmp_path, run.out)
    tree = prime_agent_code.read("tree", next((dest / "sessions").glob("*.jsonl")))
    assert tree["children"] == []
    check_totals(tree, run.result)


def test_a_continued_run_that_compacts_before_its_first_reply_is_in_prime_agents_totals(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    """Issue 40, acceptance 3: ``--from-session`` over a long conversation under a small window compacts before
    the run's first reply; that call is folded into the latest assistant entry the run copied (its own usage
    zeroed: the earlier session's spend), so Prime Agent's totals over the new session are result.json's."""
    server.add(ipython("print('step', *range(1500))"), reply("printed"))
    earlier = run_inproc(tmp_path, buggy_repo, server, *PRICE)
    assert earlier.code == 0, earlier.proc.stderr
    asked = len(server.chat_requests)
    server.route(contains(SUMMARIZER), [reply("## Goal\nsummary\n## Next Steps\ngo on")])
    server.add(reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--from-session", str(earlier.out / "session.jsonl"),
                     "--context-window", "6000", *PRICE)
    assert run.code == 0, run.proc.stderr
    assert [contains(SUMMARIZER)(r.body) for r in server.chat_requests[asked:]] == [True, False]
    tree = prime_agent_code.read("tree", run.out / "session.jsonl")
    check_totals(tree, run.result)
    entries = run.session()
    [folded] = [e for e in entries if e["type"] == "child_usage_attributed"]
    copied = [e["id"] for e in entries if e["type"] == "message" and e["message"]["role"] == "assistant"]
    assert folded["usageSource"] == "compaction" and folded["targetId"] == copied[-2], "the last copied reply"
