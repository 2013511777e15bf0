"""Children (spawned sub-agents) in a run, in process (run_inproc): replies, usage totals, shared budgets, limits,
isolated worktrees."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import UNTIL, run_inproc
from prime_ci.testing import ScriptedServer, contains, ipython, reply
from runs.children.child_probes import PIDS, cmd_has, is_child, last_tool_output

BARRIER = (  # after UNTIL in the cell
    "import os, pathlib\nhome = pathlib.Path(os.environ['HOME'])\n(home / '{name}.wrote').touch()\n"
    "until(lambda: all((home / f'{{n}}.wrote').exists() for n in ('left', 'right')), [home], 'the sibling to write')\n"
)


def test_child_replies_and_parent_completes(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.route(contains("task for worker"), [
        ipython(PIDS + "\nprint('KEY', os.environ.get('OPENAI_API_KEY'))\n"
                "print('HOSTKEY', b'sk-test-canary' in open(f'/proc/{os.getppid()}/environ', 'rb').read())"),
        ipython("print(await agent_message.send('the answer is 42', receiver_role='parent'))"),
        reply("child finished"),
    ])
    server.add(
        ipython(PIDS + "\nh = await rlm('task for worker', name='worker')\nprint(h['rlm_child_id'], h['name'])"),
        reply("waiting for worker"),
        reply("got the answer 42; done"),
    )
    run = run_inproc(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    bodies = [r.body for r in server.chat_requests]
    texts = [last_tool_output(b) for b in bodies]
    root_kernel = re.search(r"PIDS (\d+) \d+ (\S+)", texts[1]).groups()  # type: ignore[union-attr]
    child_text = next(t for t in texts if "KEY" in t and "task for worker" in t)
    child_kernel = re.search(r"PIDS (\d+) \d+ (\S+)", child_text).groups()  # type: ignore[union-attr]
    assert child_kernel != root_kernel
    assert "KEY None" in child_text and "HOSTKEY False" in child_text
    root_bodies = [b for b in bodies if not is_child(b)]
    assert any("[from child:worker]\nthe answer is 42" in last_tool_output(b) for b in root_bodies)
    result = run.result
    assert [c["name"] for c in result["children"]] == ["worker"]
    assert result["children"][0]["status"] == "completed"
    child_session = Path(result["children"][0]["session"])
    header = json.loads(child_session.read_text().splitlines()[0])
    assert header["rlmDepth"] == 1 and header["parentSession"] == str(run.out / "session.jsonl")
    assert child_session == run.out / "children" / "worker" / "session.jsonl"
    stop = json.loads(child_session.read_text().splitlines()[-1])
    assert stop["customType"] == "prime_ci.stop" and stop["data"]["litellm_loaded"] is False
    assert not any(cmd_has(p, str(run.out)) for p in Path("/proc").iterdir() if p.name.isdigit())


def test_usage_totals_include_children(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    send = ipython("print(await agent_message.send('ok', receiver_role='parent'))")
    server.route(contains("count for me"), [ipython("x = 1"), send, reply("bye")])
    server.add(ipython("await rlm('count for me', name='c1')"), reply("wait"), reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    usage = run.result["usage"]
    assert usage["model_calls"] == len(server.chat_requests) == 6
    assert usage["turns"] == 3
    sessions = [run.out / "session.jsonl", run.out / "children" / "c1" / "session.jsonl"]
    total = 0
    for path in sessions:
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("type") == "message" and entry["message"]["role"] == "assistant":
                total += entry["message"]["usage"]["totalTokens"]
    assert usage["total_tokens"] == total
    attributed = [json.loads(x) for x in sessions[0].read_text().splitlines() if "child_usage_attributed" in x]
    assert len(attributed) == 3
    [child] = run.result["children"]
    row = f"| `c1` | 1 | 3 | {child['total_tokens']:,} | unknown | `{child['status']}` |"
    assert child["model_calls"] == 3 and row in (run.out / "summary.md").read_text(), "summary.md's sub-agents table"


def test_max_tokens_stops_children_too(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.route(contains("spin forever"), [ipython(f"pad = {'x' * 400!r}") for _ in range(200)])
    # the root waits while the child spins, so the child meets the shared limit first; then the root spins too
    server.add(ipython("await rlm('spin forever', name='spinner')"), reply("waiting"),
               *[ipython("pass") for _ in range(100)])
    run = run_inproc(tmp_path, buggy_repo, server, "--max-tokens", "12000")
    assert run.code == 3, run.proc.stderr
    assert run.result["stop_reason"] == "max_tokens"
    assert run.result["usage"]["total_tokens"] <= 12000
    child_stop = json.loads((run.out / "children" / "spinner" / "session.jsonl").read_text().splitlines()[-1])
    assert child_stop["data"]["stop_reason"] == "max_tokens"
    child_calls = sum(1 for r in server.chat_requests if is_child(r.body))
    assert 3 <= child_calls < 200


def test_limits_are_clear_errors_in_the_cell(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.route(contains("nested spawn"), [ipython("try:\n    await rlm('deeper')\nexcept Exception as e:\n"
                                                    "    print('DEPTH', e)\nprint(await agent_message.send('x', "
                                                    "receiver_role='parent'))"), reply("ok")])
    server.route(contains("idle child"), [reply("nothing")])
    cell = (
        "await rlm('nested spawn', name='a')\n"
        "for label, make in [('FANOUT', lambda: rlm('idle child', name='b')),\n"
        "                    ('DUP', lambda: rlm('idle child', name='a')),\n"
        "                    ('KWARG', lambda: rlm('idle child', colour='red'))]:\n"
        "    try:\n        await make()\n    except Exception as e:\n        print(label, type(e).__name__, e)\n"
    )
    server.add(ipython(cell), reply("wait"), reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--max-children", "1")
    assert run.code == 0, run.proc.stderr
    root_view = last_tool_output(server.chat_requests[1].body)
    assert "FANOUT HostError rlm fan-out limit" in root_view
    assert "DUP HostError" in root_view and "KWARG TypeError" in root_view and "colour" in root_view
    child_view = "\n".join(last_tool_output(r.body) for r in server.chat_requests if is_child(r.body))
    assert "DEPTH rlm depth limit" in child_view


def test_isolated_worktrees_do_not_clobber(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    for name in ("left", "right"):
        server.route(contains(f"write as {name}"), [
            # both write before either reads back (a barrier in the shared HOME): shared worktrees would clobber
            ipython(UNTIL + f"open('calc.py', 'w').write('# written by {name}\\n')\n" + BARRIER.format(name=name)
                    + "print(open('calc.py').read())"),
            ipython(f"print(await agent_message.send('{name} wrote', receiver_role='parent'))"),
            reply("done"),
        ])
    server.add(
        ipython("import asyncio\nhs = await asyncio.gather(rlm('write as left', name='left', worktree='isolated'),"
                " rlm('write as right', name='right', worktree='isolated'))"),
        # the children's two messages wake the root once (both at once) or twice (the second then arrives with
        # the next cell's result): either way the script's next step is the cell, any later wake-up the default
        reply("waiting"),
        # each child commits its branch when its turn ends: the cell waits for both commits (refs renamed into
        # place in the common git dir), then reads them
        ipython(UNTIL + "import subprocess\n"
                "def show(b):\n"
                "    return subprocess.run(['git', 'show', f'{b}:calc.py'], capture_output=True, text=True).stdout\n"
                "common = subprocess.run(['git', 'rev-parse', '--path-format=absolute', '--git-common-dir'],\n"
                "                        capture_output=True, text=True, check=True).stdout.strip()\n"
                "until(lambda: all(f'written by {n}' in show(f'rlm/{n}') for n in ('left', 'right')),\n"
                "      [f'{common}/refs/heads/rlm'], 'both children to commit their branches')\n"
                "for b in ('rlm/left', 'rlm/right'):\n"
                "    print(b, show(b))\n"
                "print('MINE', open('calc.py').read())"),
        reply("all done"),
    )
    run = run_inproc(tmp_path, buggy_repo, server, "--keep-worktree")
    assert run.code == 0, run.proc.stderr
    # the root's request after its last cell (a child's last request may arrive after it)
    final = next(out for r in reversed(server.chat_requests) if "MINE" in (out := last_tool_output(r.body)))
    assert "rlm/left # written by left" in final and "rlm/right # written by right" in final
    assert "MINE def add(a, b):" in final
    assert sorted(c["branch"] for c in run.result["children"]) == ["rlm/left", "rlm/right"]


def test_a_childs_spec_is_redacted_when_written(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    """spec.json goes through the one durable writer, redacted when written (not only by the sweep at the end):
    a credential in the task the root hands over never reaches the child host, nor its model requests."""
    server.route(contains("check the spec"), [reply("child done")])
    server.add(ipython("h = await rlm('check the spec sk-test-canary', name='speccheck')\nprint(h['name'])"),
               reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server)
    child_bodies = [json.dumps(r.body) for r in server.chat_requests if is_child(r.body)]
    assert child_bodies and all("check the spec [REDACTED]" in b for b in child_bodies)
    assert not any("sk-test-canary" in b for b in child_bodies)
    spec = json.loads((run.out / "children" / "speccheck" / "spec.json").read_text())
    assert spec["task"] == "check the spec [REDACTED]"
