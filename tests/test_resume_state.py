"""`kill -9` of the whole prime-ci process group at a known point, then `prime-ci resume`: what the README
promises comes back — the conversation, the budgets, the gate-retry count and the kernel's variables.

The kill point is deterministic: the scripted server holds request N open (``hang``) and the test kills the
process group once the server has it, so everything before call N happened and nothing after it did. No
fixed sleeps: every wait is on a condition with a generous deadline.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conftest import BUGGY, PRIME_CI, by_cgroup, make_repo, run_cli, wait_for_chat
from prime_ci.testing import RecordedRequest, ScriptedServer, Step, hang, ipython, reply
from test_limits import HOG

HELD = 600.0  # seconds the server holds the request the test kills the run at (it never runs out)


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}, "OPENAI_API_KEY": "sk-test"}


def start(repo: Path, out: Path, url: str, *extra: str) -> subprocess.Popen[bytes]:
    """prime-ci in a process group of its own (kernel and gates included), so one killpg reaches all of it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.stderr", "wb") as err:
        return subprocess.Popen([PRIME_CI, "run", str(repo), "--task", "keep state", "--model", "openai/scripted",
                                 "--api-base", url, "--out", str(out), "--sandbox", "off", *extra], env=_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)


def kill_at_request(proc: subprocess.Popen[bytes], srv: ScriptedServer, n: int) -> None:
    """SIGKILL the run's process group once the server holds its ``n``-th chat request."""
    wait_for_chat(srv, n, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def session(out: Path) -> list[dict[str, Any]]:
    lines = (out / "session.jsonl").read_bytes().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def customs(entries: list[dict[str, Any]], custom_type: str) -> list[dict[str, Any]]:
    return [e["data"] for e in entries if e.get("type") == "custom" and e.get("customType") == custom_type]


def resume(out: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(["resume", str(out)], cwd=out.parent, env={"OPENAI_API_KEY": "sk-test"}, timeout=240)


class DiskWatch:
    """A script that, as each request arrives, records what session.jsonl on disk holds at that moment."""

    def __init__(self, out: Path, steps: Sequence[Step]) -> None:
        self.out, self.steps = out, list(steps)
        self.on_disk: list[list[dict[str, Any]]] = []

    def __call__(self, body: dict[str, Any]) -> Step | None:
        path = self.out / "session.jsonl"
        data = path.read_bytes() if path.exists() else b""
        complete = data[: data.rfind(b"\n") + 1]
        self.on_disk.append([json.loads(line) for line in complete.splitlines()])
        return self.steps.pop(0) if self.steps else None


def message_entries(entries: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("type") == "message" and e["message"]["role"] == role]


def prompt_tokens(request: RecordedRequest) -> int:
    """What the scripted server charges for a request's prompt (usage_scale 1)."""
    return math.ceil(len(json.dumps(request.body.get("messages", [])) + json.dumps(request.body.get("tools", []))) / 4)


def test_kill9_then_resume_brings_back_conversation_budgets_and_kernel_state(tmp_path: Path, buggy_repo: Path) -> None:
    out = tmp_path / "out"
    script = DiskWatch(out, [
        ipython("secret = 'kept-' + str(6 * 7)\nprint('set', secret)"),
        ipython("print('second cell')"),  # the kernel runs the first cell's snapshot before this cell
        hang(HELD),  # request 3: the run is killed here
        ipython("print('SECRET', secret)"),
        reply("done"),
    ])
    with ScriptedServer(script) as srv:
        kill_at_request(start(buggy_repo, out, srv.url), srv, 3)
        before = session(out)
        resumed = resume(out)
        requests = srv.chat_requests
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "completed"
    assert len(requests) == 5, [r.step_kind for r in requests]
    held, first_after, last = (r.body["messages"] for r in requests[2:5])

    # The conversation: the first request after the resume carries every earlier message, in order.
    assert len(first_after) > len(held), f"the resumed request has {len(first_after)} messages, not the {len(held)} " \
        "of the conversation before the kill and more"
    assert first_after[: len(held)] == held, "the resumed conversation differs from the one before the kill"
    assert first_after[len(held)]["role"] == "user" and "resumed" in first_after[len(held)]["content"]

    # Every entry the model's context holds was on disk when the request arrived (written before the call).
    for n, (request, on_disk) in enumerate(zip(requests, script.on_disk, strict=True)):
        tool_results = [m for m in request.body["messages"] if m["role"] == "tool"]
        assert len(message_entries(on_disk, "toolResult")) >= len(tool_results), f"request {n + 1}"

    # The kernel: a variable set before the kill is readable after it.
    assert last[-2]["role"] == "assistant" and last[-1]["role"] == "tool"
    assert "SECRET kept-42" in last[-1]["content"], f"the kernel variable is gone: {last[-1]['content'][-400:]}"

    # The budgets: turns and tokens continue from the log.
    usage_before = customs(before, "prime_ci.usage")[-1]
    assert usage_before["turns"] == 2
    usage = result["usage"]
    assert usage["turns"] == usage_before["turns"] + 2 and usage["model_calls"] == usage_before["model_calls"] + 2
    after_prompts = sum(prompt_tokens(r) for r in requests[3:])
    assert usage["prompt_tokens"] == usage_before["prompt_tokens"] + after_prompts, (usage, usage_before)
    assert usage["total_tokens"] > usage_before["total_tokens"] + after_prompts


def test_kill9_then_resume_continues_the_gate_retry_count(tmp_path: Path, buggy_repo: Path) -> None:
    out = tmp_path / "out"
    with ScriptedServer([reply("done"), hang(HELD), reply("done again"), reply("one round too many")]) as srv:
        # one failed round (fed back) before the kill, one after it: with --max-gate-retries 1 that is the end
        kill_at_request(start(buggy_repo, out, srv.url, "--gate", "false", "--max-gate-retries", "1"), srv, 2)
        before = session(out)
        resumed = resume(out)
        requests = srv.chat_requests
    assert [r["round"] for r in customs(before, "prime_ci.gate")] == [1]
    assert resumed.returncode == 1, resumed.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "gates_failed"
    assert len(requests) == 3, "a third gate round was fed back: the retry count restarted after the resume"
    rounds = customs(session(out), "prime_ci.gate")
    assert len(rounds) == 2 and not any("skipped" in r for r in rounds), rounds
    assert "Gate round 1" in requests[2].body["messages"][-2]["content"]  # the feedback came back with the rest
    summary = (out / "summary.md").read_text()  # the rounds before the kill are in the reviewer's table too
    assert "| 1 | full | ❌ red | `false` |" in summary and "| 2 | full | ❌ red | `false` |" in summary, summary


def test_kill9_then_resume_keeps_the_runs_limits(tmp_path: Path) -> None:
    """``--limits`` is one of the run's settings, recorded with the others: after the resume a gate is still
    stopped by it, although the resuming process was given neither the flag nor PRIME_CI_LIMITS."""
    repo = make_repo(tmp_path / "repo", {**BUGGY, "hog.py": HOG})
    out = tmp_path / "out"
    with ScriptedServer([hang(HELD), reply("done")]) as srv:
        kill_at_request(start(repo, out, srv.url, "--limits", "memory=384MiB,pids=512", "--gate", "python hog.py",
                              "--max-gate-retries", "0"), srv, 1)
        (recorded,) = [r["config"]["limits"] for r in customs(session(out), "prime_ci.run")]
        resumed = resume(out)
    assert recorded["memory"] == 384 << 20 and recorded["pids"] == 512, recorded
    assert resumed.returncode == 1, resumed.stderr
    assert "limits: processes 512" in resumed.stderr and "memory 384 MiB" in resumed.stderr, resumed.stderr
    (log,) = (out / "gates").glob("*.log")
    killed = "[prime-ci] killed: memory limit 384 MiB" if by_cgroup("memory") else "MemoryError"
    assert log.read_text(errors="replace").rstrip().endswith(killed)
