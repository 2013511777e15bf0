"""Issue 16, the writer side: the session prime-ci writes reads in Prime Agent as the run it was.

``prime_agent_context`` below restates Prime Agent's context rule (``buildSessionContext`` and
``convertToLlm`` in its session manager and messages modules): walk the parentId chain from the last entry;
with a compaction on the path the model sees its summary first (a user message wrapping it), then the messages
from ``firstKeptEntryId`` up to the compaction, then those after it; ``message`` entries are themselves,
``custom_message`` entries user messages, everything else nothing. The tests hold prime-ci to it: at every
model request the conversation sent (system prompt aside) is what that rule builds from the log on disk, across
compactions and a kill -9 with ``prime-ci resume``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from conftest import HANG, PRIME_CI, run_cli, run_prime, wait_until
from prime_ci.engine.resume import rebuild
from prime_ci.session.log import read_session
from prime_ci.testing import ScriptedServer, Step, contains, ipython, reply
from runs.children.child_probes import script_two_generations

SUMMARIZER = "compacting the working context"
COST_KEYS = {"input", "output", "cacheRead", "cacheWrite", "total"}
USAGE_KEYS = {"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"}
Entries = list[dict[str, Any]]


# --- Prime Agent's rule, restated -------------------------------------------------------------------------------


def prime_agent_context(entries: Entries) -> list[dict[str, Any]]:
    """The provider messages Prime Agent would send for this session (without its system prompt)."""
    by_id = {e["id"]: e for e in entries if isinstance(e.get("id"), str)}
    path: Entries = []
    node = next((e for e in reversed(entries) if isinstance(e.get("id"), str)), None)
    while node is not None:
        path.append(node)
        node = by_id.get(node.get("parentId") or "")
    path.reverse()
    cut = max((i for i, e in enumerate(path) if e["type"] == "compaction"), default=None)
    if cut is None:
        agent = [m for e in path if (m := _agent_message(e)) is not None]
    else:
        compaction = path[cut]
        ids = [e["id"] for e in path[:cut]]
        first = ids.index(compaction["firstKeptEntryId"]) if compaction["firstKeptEntryId"] in ids else cut
        kept = [m for e in path[first:cut] if (m := _agent_message(e)) is not None]
        after = [m for e in path[cut + 1:] if (m := _agent_message(e)) is not None]
        agent = [{"role": "compactionSummary", "summary": compaction["summary"]}, *kept, *after]
    return [_llm(m) for m in agent]


def _agent_message(entry: dict[str, Any]) -> dict[str, Any] | None:
    if entry["type"] == "message":
        message: dict[str, Any] = entry["message"]
        return message
    if entry["type"] == "custom_message":
        return {"role": "custom", "content": entry["content"]}
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def _llm(m: dict[str, Any]) -> dict[str, Any]:
    """One message in a provider-neutral form: role, text, tool calls (id, name, parsed arguments)."""
    role = m["role"]
    if role == "compactionSummary":
        wrapped = ("The conversation history before this point was compacted into the following summary:\n\n"
                   f"<summary>\n{m['summary']}\n</summary>")
        return {"role": "user", "text": wrapped}
    if role in ("custom", "user"):
        return {"role": "user", "text": _text(m["content"])}
    if role == "toolResult":
        return {"role": "tool", "call": m["toolCallId"], "text": _text(m["content"])}
    calls = [(p["id"], p["name"], p["arguments"]) for p in m["content"] if p.get("type") == "toolCall"]
    return {"role": "assistant", "text": _text(m["content"]), "calls": calls}


def sent(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chat request's messages (or prime-ci's own conversation) in the same form as ``_llm``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        text = m.get("content") or ""
        text = text if isinstance(text, str) else _text(text)
        if m["role"] == "tool":
            out.append({"role": "tool", "call": m["tool_call_id"], "text": text})
        elif m["role"] == "assistant":
            calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                     for c in m.get("tool_calls") or []]
            out.append({"role": "assistant", "text": text, "calls": calls})
        else:
            out.append({"role": m["role"], "text": text})
    return out


# --- running prime-ci -------------------------------------------------------------------------------------------


def session(path: Path) -> Entries:
    """The complete records: while the run writes, the last line may not have its newline yet."""
    data = path.read_bytes()
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]


class OnDisk:
    """The root's model steps, recording for each request the session entries on disk when it arrived."""

    def __init__(self, log: Path, steps: list[Step]) -> None:
        self.log, self.steps = log, steps
        self.seen: list[tuple[dict[str, Any], Entries]] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Step | None:
        entries = session(self.log)
        with self.lock:
            self.seen.append((body, entries[1:]))
        return self.steps.pop(0) if self.steps else None


def start(repo: Path, out: Path, url: str, *extra: str) -> subprocess.Popen[bytes]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}, "OPENAI_API_KEY": "sk-test"}
    return subprocess.Popen([PRIME_CI, "run", str(repo), "--task", "Fix the failing test.", "--model",
                             "openai/scripted", "--api-base", url, "--out", str(out), "--sandbox", "off", *extra],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def check_usage(entries: Entries) -> None:
    for e in entries:
        if e["type"] == "message" and e["message"]["role"] == "assistant":
            usage = e["message"]["usage"]
            assert set(usage) == USAGE_KEYS and set(usage["cost"]) == COST_KEYS, usage


def check_model_change(entries: Entries) -> None:
    changes = [e for e in entries if e["type"] == "model_change"]
    assert [(c["provider"], c["modelId"]) for c in changes] == [("openai", "scripted")], changes
    assistants = [e["message"] for e in entries if e["type"] == "message" and e["message"]["role"] == "assistant"]
    assert all((m["provider"], m["model"]) == ("openai", "scripted") for m in assistants)


def check_compactions(entries: Entries) -> int:
    for i, e in enumerate(entries):
        if e["type"] == "compaction":
            assert e["firstKeptEntryId"] in {x["id"] for x in entries[:i]}, e["firstKeptEntryId"]
            assert e["tokensBefore"] > 0 and "The task, as it was given:\nFix the failing test." in e["summary"]
    assert not any(e.get("customType") == "compaction_summary" for e in entries), "the summary is logged twice"
    return sum(e["type"] == "compaction" for e in entries)


# --- the tests --------------------------------------------------------------------------------------------------


def test_compacted_then_killed_and_resumed_session_is_the_conversation_prime_agent_builds(
    tmp_path: Path, buggy_repo: Path
) -> None:
    out = tmp_path / "out"
    fillers = [ipython(f"print('step {i}', *range(400))") for i in range(16)]  # ~800 tokens each
    script = OnDisk(out / "session.jsonl", [
        ipython("marker = 'kept'"),
        ipython("print(await compact.run(focus='the marker'))"),  # on demand: the kept part is empty
        *fillers[:9],  # over the threshold of the small window: compactions that keep recent turns
        ipython(HANG),  # killed in this cell: its call has no result in the log
        *fillers[9:],
        ipython("print('MARKER', marker)"),
        reply("done"),
    ])
    with ScriptedServer(script) as srv:
        srv.route(contains(SUMMARIZER), [reply(f"## Goal\nsummary {n}\n## Next Steps\ncontinue") for n in range(20)])
        proc = start(buggy_repo, out, srv.url, "--context-window", "6000")
        wait_until(lambda: (out / "session.jsonl").exists() and any(
            "threading.Event().wait()" in json.dumps(e.get("message", {})) for e in session(out / "session.jsonl")),
            timeout=180, what="the sleeping cell")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        (tmp_path / "at-kill.jsonl").write_bytes((out / "session.jsonl").read_bytes())
        at_kill = session(tmp_path / "at-kill.jsonl")
        resumed = run_cli(["resume", str(out)], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"}, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
    entries = session(out / "session.jsonl")
    assert check_compactions(at_kill) >= 2 and check_compactions(entries) > check_compactions(at_kill)
    by_id = {e.get("id"): e for e in entries}
    kept = {by_id[e["firstKeptEntryId"]]["type"] for e in entries if e["type"] == "compaction"}
    assert kept == {"message", "custom"}, "compactions that keep recent turns, and one that keeps none"

    # every request: the conversation sent is what Prime Agent's rule builds from the log on disk
    assert not script.steps and len(script.seen) == 21
    for n, (body, on_disk) in enumerate(script.seen):
        assert body["messages"][0]["role"] == "system"
        assert sent(body["messages"][1:]) == prime_agent_context(on_disk), f"request {n + 1}"

    # resume's rebuild is the same rule; the call the kill left open is answered, and that answer is logged
    state = rebuild(read_session(tmp_path / "at-kill.jsonl", strict=True))
    assert sent(state.messages[:-1]) == prime_agent_context(at_kill[1:]) and state.ids[-1] is None
    assert state.messages[-1]["role"] == "tool" and "interrupted" in state.messages[-1]["content"]
    answer = next(e for e in entries[len(at_kill):] if e["type"] == "message")["message"]
    assert answer["role"] == "toolResult" and answer["toolCallId"] == state.messages[-1]["tool_call_id"]
    assert _text(answer["content"]) == state.messages[-1]["content"]
    assert "MARKER kept" in json.dumps(script.seen[-1][0]["messages"][-3:])  # the kernel came back too

    # the log itself: the task is the first user message, the header names the repository, model ids, usage
    header, body_entries = entries[0], entries[1:]
    assert header["cwd"] == str(buggy_repo.resolve())
    first_message = next(e for e in body_entries if e["type"] in ("message", "custom_message"))
    assert first_message["type"] == "message" and first_message["message"]["role"] == "user"
    assert _text(first_message["message"]["content"]) == "Fix the failing test."
    check_model_change(body_entries)
    check_usage(body_entries)


def test_children_attribute_usage_to_the_spawning_assistant_entry_and_export_to_prime_agent_layout(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    script_two_generations(server)
    run = run_prime(tmp_path, buggy_repo, server, "--max-depth", "2")
    assert run.code == 0, run.proc.stderr
    root = session(run.out / "session.jsonl")
    kid = session(run.out / "children" / "kid" / "session.jsonl")
    gk = session(run.out / "children" / "gk" / "session.jsonl")
    for entries in (root, kid, gk):
        assert entries[0]["cwd"] == str(buggy_repo.resolve())
        check_model_change(entries[1:])
        check_usage(entries[1:])
    kid_calls = sum(1 for r in server.chat_requests if contains("child task")(r.body))
    gk_calls = sum(1 for r in server.chat_requests if contains("grand task")(r.body))
    check_attributions(root, kid_calls + gk_calls, "kid")  # the grandchild's spend reaches the root too
    check_attributions(kid, gk_calls, "gk")
    assert sum(e.get("descendantName") == "gk" for e in root) == gk_calls

    # the task is the child's first user message; where it came from is Prime Agent's agent-message details
    task = next(e for e in kid if e["type"] in ("message", "custom_message"))
    assert task["type"] == "message" and task["message"]["role"] == "user"
    assert _text(task["message"]["content"]) == "[task from parent]\n\nchild task"
    spawn = next(e["data"] for e in kid if e.get("customType") == "prime_ci.task")
    assert spawn["id"].startswith("spawn:") and spawn["message"] == "child task"
    assert spawn["from"]["sessionId"] == root[0]["id"] and spawn["fromRelationship"] == "parent"
    reply_to_root = next(e for e in root if e.get("customType") == "agent_message")["details"]
    assert reply_to_root["message"] == "kid done" and reply_to_root["fromRelationship"] == "child"
    assert reply_to_root["from"] == {"sessionId": kid[0]["id"], "sessionName": "kid",
                                     "activeSessionId": reply_to_root["from"]["activeSessionId"]}
    target = reply_to_root["target"]
    assert target["sessionId"] == root[0]["id"] and target["runtimeKind"] == "top-level"

    # prime-ci export --prime-agent: sessions/<id>.jsonl, session-artifacts/<id>/sub-<8 hex>/[sub-<8 hex>/]
    dest = tmp_path / "prime-agent"
    exported = run_cli(["export", str(run.out), "--prime-agent", str(dest)], cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    rid = root[0]["id"]
    assert (dest / "sessions" / f"{rid}.jsonl").read_bytes() == (run.out / "session.jsonl").read_bytes()
    kid_dirs = list((dest / "session-artifacts" / rid).glob("sub-????????"))
    assert len(kid_dirs) == 1 and (kid_dirs[0] / f"{kid[0]['id']}.jsonl").is_file()
    gk_file = next(kid_dirs[0].glob(f"sub-????????/{gk[0]['id']}.jsonl"))
    gk_source = (run.out / "children" / "gk" / "session.jsonl").read_bytes().split(b"\n")
    gk_lines = gk_file.read_bytes().split(b"\n")  # all but the header and the task, byte for byte
    at = next(i for i, e in enumerate(gk) if e["type"] == "message")
    assert gk_lines[1:at] + gk_lines[at + 1:] == gk_source[1:at] + gk_source[at + 1:]
    exported_gk = read_session(gk_file, strict=True)
    assert exported_gk.header["parentSession"] == str(kid_dirs[0] / f"{kid[0]['id']}.jsonl")
    assert not exported_gk.rewritten and _text(exported_gk.entries[at - 1]["message"]["content"]) == "grand task"


def check_attributions(entries: Entries, calls: int, child: str) -> None:
    """Every call of ``child`` is folded into the parent's assistant entry that spawned it; the aggregate is
    that entry's own usage plus every child call so far, its totalTokens the entry's own."""
    by_id = {e.get("id"): e for e in entries}
    found = [e for e in entries if e["type"] == "child_usage_attributed" and e.get("childName") == child]
    assert len(found) == calls > 0
    targets = {e["targetId"] for e in found}
    assert len(targets) == 1
    target = by_id[targets.pop()]
    assert target["type"] == "message" and target["message"]["role"] == "assistant"
    assert any(c.get("name") == "ipython" and f"name='{child}'" in c["arguments"]["code"]
               for c in target["message"]["content"] if c.get("type") == "toolCall")
    own = target["message"]["usage"]
    total = dict(own, cost=dict(own["cost"]))
    for e in found:
        assert set(e["childUsage"]) == USAGE_KEYS and set(e["childUsage"]["cost"]) == COST_KEYS
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            total[key] += e["childUsage"][key]
        for key in COST_KEYS:
            total["cost"][key] += e["childUsage"]["cost"][key]
        assert e["aggregateUsage"] == total and e["aggregateUsage"]["totalTokens"] == own["totalTokens"]
        assert e["origin"] in ("spawn_task", "agent_message", "direct_user")
