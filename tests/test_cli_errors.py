"""Issue 2 acceptance 6: malformed invocations exit 2 cleanly; malformed tool calls get error results.

A malformed invocation must exit 2 with exactly one non-empty line on stderr, no traceback, and touch
nothing: no out dir, no files in the working directory, the repository unchanged, no worktree left behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import BUGGY, make_repo, repo_state, run_cli, run_prime
from prime_ci.testing import ScriptedServer, reply, tool_call

BROKEN_TOML = '[[gate]]\nname = "tests"\ncommand = "python -m pytest -q\n'  # unterminated string on line 3
INCOMPLETE_TOML = '[[gate]]\nname = "tests"\ntimeout = "5m"\n'  # a gate without its command


@dataclass
class Case:
    args: list[str]  # "{repo}", "{plain}", "{tmp}" are substituted
    needles: list[str] = field(default_factory=list)  # must all appear in the stderr line (case-insensitive)
    env: dict[str, str] = field(default_factory=dict)


MODEL = ["--model", "openai/scripted", "--api-base", "http://127.0.0.1:9/v1"]
CASES: dict[str, Case] = {
    "no-task": Case(["run", "{repo}", *MODEL], ["task"]),
    "task-and-task-file": Case(["run", "{repo}", "--task", "t", "--task-file", "{tmp}/task.md", *MODEL], ["task"]),
    "bad-duration": Case(["run", "{repo}", "--task", "t", "--max-wall", "5x", *MODEL], ["max-wall", "5x"]),
    "negative-number": Case(["run", "{repo}", "--task", "t", "--max-turns", "-1", *MODEL], ["max-turns"]),
    "missing-repo": Case(["run", "{tmp}/no-such-repo", "--task", "t", *MODEL], ["no-such-repo"]),
    "not-a-git-repo": Case(["run", "{plain}", "--task", "t", *MODEL], ["git"]),
    "missing-task-file": Case(["run", "{repo}", "--task-file", "{tmp}/missing.md", *MODEL], ["missing.md"]),
    "broken-gates-toml-in-repo": Case(
        ["run", "{repo}", "--task", "t", "--gates-file", "{repo}/gates/broken.toml", *MODEL], ["broken.toml", "line 3"]
    ),
    "broken-gates-toml-outside": Case(
        ["run", "{repo}", "--task", "t", "--gates-file", "{tmp}/broken.toml", *MODEL], ["broken.toml", "line 3"]
    ),
    "incomplete-gates-toml-in-repo": Case(
        ["run", "{repo}", "--task", "t", "--gates-file", "{repo}/gates/incomplete.toml", *MODEL],
        ["incomplete.toml", "command"],
    ),
    "incomplete-gates-toml-outside": Case(
        ["run", "{repo}", "--task", "t", "--gates-file", "{tmp}/incomplete.toml", *MODEL],
        ["incomplete.toml", "command"],
    ),
    "unknown-ref": Case(["run", "{repo}", "--task", "t", "--ref", "no-such-branch", *MODEL], ["no-such-branch"]),
    "model-missing": Case(["run", "{repo}", "--task", "t"], ["model"]),
    "bad-sandbox": Case(["run", "{repo}", "--task", "t", "--sandbox", "maybe", *MODEL], ["sandbox", "maybe"]),
}


def _worktree_dirs(root: Path) -> set[Path]:
    return set(root.glob("prime-ci-wt-*"))


def _ours(directory: Path, repo: Path) -> bool:
    """Whether a /tmp/prime-ci-wt-* directory is a clone of `repo` (other test runs may share /tmp)."""
    try:
        return any(str(repo) in p.read_text(errors="replace") for p in directory.glob("*/config"))
    except OSError:
        return False


@pytest.mark.parametrize("name", list(CASES))
def test_malformed_invocation_exits_2_and_touches_nothing(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    repo = make_repo(tmp_path / "repo", {
        **BUGGY, "gates/broken.toml": BROKEN_TOML, "gates/incomplete.toml": INCOMPLETE_TOML,
    })
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "calc.py").write_text(BUGGY["calc.py"])
    (tmp_path / "task.md").write_text("Fix the failing test.\n")
    (tmp_path / "broken.toml").write_text(BROKEN_TOML)
    (tmp_path / "incomplete.toml").write_text(INCOMPLETE_TOML)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    private_tmp = tmp_path / "tmpdir"
    private_tmp.mkdir()
    out = tmp_path / "out"
    subst = {"{repo}": str(repo), "{plain}": str(plain), "{tmp}": str(tmp_path)}
    args = [_substitute(a, subst) for a in case.args] + ["--out", str(out)]

    before_repo, before_plain = repo_state(repo), sorted(p.name for p in plain.iterdir())
    system_tmp = Path(tempfile.gettempdir())
    before_wt = _worktree_dirs(system_tmp)
    proc = run_cli(args, cwd=cwd, env={"TMPDIR": str(private_tmp), "OPENAI_API_KEY": "sk-test-canary",
                                       **case.env}, timeout=60)

    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    for stream in (proc.stderr, proc.stdout):
        assert "Traceback" not in stream, stream
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines}"
    for needle in case.needles:
        assert needle.lower() in lines[0].lower(), f"{needle!r} not in {lines[0]!r}"

    assert not out.exists(), "the out dir was created"
    assert list(cwd.iterdir()) == [], "files were written into the working directory"
    assert repo_state(repo) == before_repo, "the repository was modified"
    assert sorted(p.name for p in plain.iterdir()) == before_plain
    assert list(private_tmp.iterdir()) == [], f"left behind in TMPDIR: {list(private_tmp.iterdir())}"
    leftovers = [d for d in _worktree_dirs(system_tmp) - before_wt if _ours(d, repo)]
    assert leftovers == [], f"worktrees left behind: {leftovers}"


def _substitute(arg: str, subst: dict[str, str]) -> str:
    for key, value in subst.items():
        arg = arg.replace(key, value)
    return arg


# --- malformed tool calls ----------------------------------------------------------------------------------------


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _tool_results(session: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["message"] for e in session if e.get("type") == "message" and e["message"].get("role") == "toolResult"]


def test_invalid_json_arguments_get_an_error_result_and_the_run_goes_on(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.add(reply(tool_calls=[tool_call("ipython", '{"code": "print(1)"', id="call_bad")]),
               reply("Sorry, I will stop here."))
    run = run_prime(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    assert run.result["stop_reason"] == "completed"
    requests = server.chat_requests
    assert len(requests) == 2
    tools = _tool_messages(requests[1].body)
    assert len(tools) == 1 and tools[0]["tool_call_id"] == "call_bad"
    assert "not valid JSON" in _content(tools[0])
    results = _tool_results(run.session())
    assert len(results) == 1 and results[0]["isError"] is True


def test_only_the_first_of_two_tool_calls_runs(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    marker = tmp_path / "second-call-ran"
    first = "open('first.txt', 'w').write('first\\n')\nprint('first ran')"
    second = (f"open({json.dumps(str(marker))}, 'w').write('x')\n"
              "open('second.txt', 'w').write('second\\n')\nprint('second ran')")
    server.add(
        reply(tool_calls=[tool_call("ipython", {"code": first}, id="call_one"),
                          tool_call("ipython", {"code": second}, id="call_two")]),
        reply("Done."),
    )
    run = run_prime(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    assert not marker.exists(), "the second tool call was executed"
    assert os.path.exists(run.out / "patch.diff")
    assert run.result["changed_files"] == ["first.txt"]

    requests = server.chat_requests
    assert len(requests) == 2
    tools = {m["tool_call_id"]: _content(m) for m in _tool_messages(requests[1].body)}
    assert set(tools) == {"call_one", "call_two"}
    assert "first ran" in tools["call_one"]
    assert "second ran" not in tools["call_two"] and tools["call_two"].strip()
    results = {r["toolCallId"]: r for r in _tool_results(run.session())}
    assert results["call_one"]["isError"] is False
    assert results["call_two"]["isError"] is True
