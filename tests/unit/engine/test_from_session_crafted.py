"""Issue 37: crafted sessions at ``--from-session``: a malformed entry is one line naming its line (exit 2), an
unknown version is refused, the load is linear and the run's wall clock counts it."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_inproc, run_inproc
from prime_ci.engine import from_session
from prime_ci.engine.from_session import load_origin
from prime_ci.engine.resume import context_message
from prime_ci.errors import ConfigError
from prime_ci.session.tree import branches
from prime_ci.testing import ScriptedServer, reply

HEADER = {"type": "session", "version": 3, "id": "s-1", "timestamp": "2026-12-01T00:00:00.000Z", "cwd": "/w"}
ASK = {"role": "user", "content": [{"type": "text", "text": "make the tests pass"}], "timestamp": 1}
ANSWER = {"role": "assistant", "content": [{"type": "text", "text": "on it"}], "timestamp": 2}


def session(path: Path, messages: list[Any], header: dict[str, Any] | None = None) -> Path:
    """A Prime Agent session: the header, then one chained message entry per message."""
    lines = [json.dumps(header or HEADER)]
    for i, message in enumerate(messages):
        lines.append(json.dumps({"type": "message", "id": f"e{i}", "parentId": f"e{i - 1}" if i else None,
                                 "timestamp": "2026-12-01T00:00:01.000Z", "message": message}))
    path.write_text("\n".join(lines) + "\n")
    return path


CALL = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}
MALFORMED = {
    "assistant content is a string": ({**ANSWER, "content": "plain text"}, "an assistant message whose content is a "
                                                                           "string, not a list of parts"),
    "message not an object": ("hello", "a message entry whose message is a string, not an object"),
    "user content a number": ({**ASK, "content": 7}, "a user message whose content is a number, not a list of parts"),
    "no role": ({"content": []}, "a message whose role is null"),
    "part not an object": ({**ANSWER, "content": ["text"]}, "a content part that is a string without a type"),
    "text not a string": ({**ANSWER, "content": [{"type": "text", "text": ["x"]}]}, "a text part whose text is a list"),
    "tool call without an id": ({**ANSWER, "content": [{**CALL, "id": None}]},
                                "a tool call without a string id and name"),
    "result without its call": ({"role": "toolResult", "toolCallId": {"id": "c1"}, "toolName": "bash",
                                 "content": []}, "a toolResult message whose toolCallId is an object"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_entry_is_refused_naming_its_line(tmp_path: Path, case: str) -> None:
    bad, reason = MALFORMED[case]
    path = session(tmp_path / "s.jsonl", [ASK, ANSWER, bad, ANSWER])
    with pytest.raises(ConfigError) as info:
        load_origin(path)
    assert str(info.value) == f"--from-session {path}: line 4: {reason}; nothing was started"


def test_entries_off_the_active_branch_are_not_read(tmp_path: Path) -> None:
    path = session(tmp_path / "s.jsonl", [ASK, {**ANSWER, "content": "off the branch"}])
    with path.open("a") as f:  # the leaf starts again from the first message: the bad entry is not in the context
        f.write(json.dumps({"type": "message", "id": "e9", "parentId": "e0", "message": ANSWER}) + "\n")
    assert [m["content"] for m in map(context_message, load_origin(path).after) if m] == ["make the tests pass",
                                                                                        "on it"]


def test_the_crafted_session_is_one_line_exit_2_and_nothing_started(tmp_path: Path, buggy_repo: Path) -> None:
    path = session(tmp_path / "s.jsonl", [{**ANSWER, "content": "a string where the parts go"}])
    proc = cli_inproc(["run", str(buggy_repo), "--from-session", str(path), "--model", "openai/scripted",
                       "--api-base", "http://127.0.0.1:9", "--out", str(tmp_path / "out")],
                      cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "line 2: an assistant message whose content is a string" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize("version", [4, "3", None, 0])
def test_a_version_prime_ci_does_not_read_is_refused(tmp_path: Path, version: object) -> None:
    path = session(tmp_path / "s.jsonl", [ASK, ANSWER], {**HEADER, "version": version})
    with pytest.raises(ConfigError, match=r"session version .* is not one prime-ci reads \(1 to 3\)"):
        load_origin(path)


def test_a_version_1_file_is_read_as_prime_agent_migrates_it(tmp_path: Path) -> None:
    """No ids (each entry follows the one before), a compaction keeping from ``firstKeptEntryIndex``."""
    header = {k: v for k, v in HEADER.items() if k != "version"}
    entries = [{"type": "message", "message": {**ASK, "content": f"turn {i}"}} for i in range(4)]
    entries.insert(3, {"type": "compaction", "summary": "SUMMARY", "firstKeptEntryIndex": 3})  # header is index 0
    (tmp_path / "v1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [header, *entries]))
    origin = load_origin(tmp_path / "v1.jsonl")
    assert origin.summary == "SUMMARY" and origin.task == "turn 0"
    assert [e["message"]["content"] for e in origin.kept] == ["turn 2"]
    assert [e["message"]["content"] for e in origin.after] == ["turn 3"]


@pytest.fixture
def cpu_budget() -> Iterator[None]:
    """Fail the test when this process has spent 5 s of CPU (user + system) in it: a linear pass over 100,000
    entries takes about a tenth of a second, a quadratic one minutes. CPU time, not the wall clock: other work on
    the machine does not count."""

    def over(signum: int, frame: object) -> None:
        raise AssertionError("more than 5 s of CPU: the walk is not linear")

    previous = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, 5.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_a_long_chain_read_leaf_first_is_walked_in_linear_time(cpu_budget: None) -> None:
    """100,000 entries each naming the next one as its parent, the last a new root: every entry is off the active
    branch, and its walk to the root goes through all those after it (quadratic when each step searched the walk
    so far: 239 s for this session)."""
    n = 100_000
    entries = [{"type": "message", "id": f"e{i}", "parentId": f"e{i + 1}"} for i in range(n - 1)]
    entries.append({"type": "message", "id": "leaf", "parentId": None})
    found = branches(entries)
    assert found.path == [n - 1] and len(found.off_branch) == n - 1 and not found.forks


class _Clock:
    """``time`` for from_session: the load seems to take 100 s."""

    def __init__(self) -> None:
        self.calls = 0

    def monotonic(self) -> float:
        self.calls += 1
        return 100.0 * (self.calls - 1)


def test_the_load_counts_against_max_wall(tmp_path: Path, buggy_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = session(tmp_path / "s.jsonl", [ASK, ANSWER])
    monkeypatch.setattr(from_session, "time", _Clock())
    with ScriptedServer([reply("done")]) as server:
        run = run_inproc(tmp_path, buggy_repo, server, "--from-session", str(path), "--max-wall", "30s",
                         "--sandbox", "off", task="Go on.")
        assert run.code == 3, run.proc.stderr
        assert not server.chat_requests
    assert run.result["stop_reason"] == "max_wall" and run.result["wall_s"] >= 100
