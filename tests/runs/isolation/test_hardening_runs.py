"""Issue 17 in process (run_inproc): hostile repository settings and model output that must end with their
documented outcome: lowered budgets, protected-path bypasses, planted git filter drivers, changes the patch never
shows, a root kernel posing as a child, 200k-deep JSON."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import BUGGY, PYTEST_GATE, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, ipython, raw, reply, tool_call


def test_repository_settings_may_lower_budgets(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "prime-ci.toml": "max-turns = 1\nmax-tokens = 900000\n"})
    with ScriptedServer([reply("done")]) as srv:
        run = run_inproc(tmp_path, repo, srv)
    assert run.code == 0, run.proc.stderr
    assert run.result["budgets"]["max_turns"] == 1 and run.result["budgets"]["max_tokens"] == 900000
    # the operator's own flag is what a repository value is compared with
    with ScriptedServer([reply("done")]) as srv:
        raised = run_inproc(tmp_path, repo, srv, "--max-tokens", "500000")
    assert raised.code == 0 and raised.result["budgets"]["max_tokens"] == 500000


@pytest.mark.parametrize("path", ["tests/ünï/conftest.py", "sub dir/\"q\"/conftest.py", "pytest.toml",
                                  ".pytest.ini", ".pytest.toml", "gates.toml"])
def test_protected_path_bypasses_are_a_security_stop(tmp_path: Path, path: str) -> None:
    gates = f'[[gate]]\nname = "t"\ncommand = "{PYTEST_GATE}"\n'
    repo = make_repo(tmp_path / "repo", {**BUGGY, "gates.toml": gates})
    cell = f"import pathlib\np = pathlib.Path({path!r})\np.parent.mkdir(parents=True, exist_ok=True)\n" \
           "p.write_text('# changed\\n')\n"
    with ScriptedServer([ipython(cell), reply("done")]) as srv:
        run = run_inproc(tmp_path, repo, srv, "--gates-file", str(repo / "gates.toml"), "--max-gate-retries", "0")
    assert run.code == 7, run.proc.stderr
    assert run.result["stop_reason"] == "security_stop"
    assert path in run.result["changed_files"] and path in run.result["detail"]


def test_a_filter_driver_planted_in_the_clones_config_never_runs_on_the_host(tmp_path: Path,
                                                                              buggy_repo: Path) -> None:
    marker = tmp_path / "PWNED"
    cell = ("import subprocess, pathlib\n"
            "pathlib.Path('.gitattributes').write_text('*.py filter=evil\\n')\n"
            f"subprocess.run(['git', 'config', 'filter.evil.clean', 'touch {marker}; cat'], check=True)\n"
            "subprocess.run(['git', 'config', 'filter.Evil2.smudge', 'touch {marker}; cat'], check=True)\n"
            "pathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n")
    with ScriptedServer([ipython(cell), reply("done")]) as srv:
        # a gate that runs no git itself (pytest-benchmark would, and a gate is the project's own code anyway)
        run = run_inproc(tmp_path, buggy_repo, srv, "--sandbox", "off", "--gate",
                        "python -c 'import calc; assert calc.add(2, 3) == 5'")
    assert run.code == 0, run.proc.stderr
    assert not marker.exists(), "the host ran the kernel's filter driver"
    assert "return a + b" in (run.out / "patch.diff").read_text()


def test_a_filter_driver_in_repos_own_config_never_runs_on_the_host(tmp_path: Path) -> None:
    """Issue 24 item 1, by path as a user runs it: REPO's .git/config names a process filter and a clean filter
    (one under a name with ``=``), its .gitattributes uses them, and files need hashing again; the dirty check,
    the --include-dirty snapshot and the patch run none of them."""
    marks = tmp_path / "ran"
    marks.mkdir()
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\ntouch "{marks}/$1"\ncat\n')
    script.chmod(0o755)
    repo = make_repo(tmp_path / "repo", {**BUGGY, ".gitattributes": "*.py filter=evil\n*.md filter=a=b\n",
                                         "README.md": "r\n"})
    for key, value in {"filter.evil.process": f"{script} process", "filter.evil.clean": f"{script} clean",
                       "filter.a=b.clean": f"{script} equals"}.items():
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    for path in (repo / "test_calc.py", repo / "README.md"):
        os.utime(path, (978307200, 978307200))
    (repo / "notes.txt").write_text("uncommitted\n")
    cell = "import pathlib\npathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n"
    with ScriptedServer([ipython(cell), reply("done")]) as srv:
        run = run_inproc(tmp_path, repo, srv, "--sandbox", "off", "--include-dirty", "--gate",
                        "python -c 'import calc; assert calc.add(2, 3) == 5'")
    assert run.code == 0, run.proc.stderr
    assert sorted(p.name for p in marks.iterdir()) == [], "the host ran a filter REPO's config names"
    assert "return a + b" in (run.out / "patch.diff").read_text() and run.result["dirty"] == ["notes.txt"]


HIDDEN_CONFTEST = (
    "from pathlib import Path\n"
    "Path('.gitignore').write_text('conftest.py\\n')\n"
    "Path('conftest.py').write_text('import pytest\\n\\n@pytest.hookimpl(hookwrapper=True)\\n"
    "def pytest_runtest_makereport(item, call):\\n    outcome = yield\\n    report = outcome.get_result()\\n"
    "    report.outcome = \"passed\"\\n')\n")
FORGED_PYC = (
    "import os, py_compile\nfrom pathlib import Path\n"
    "src = Path('calc.py'); buggy = src.read_text(); st = os.stat(src)\n"
    "src.write_text(buggy.replace('a - b', 'a + b')); os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))\n"
    "py_compile.compile('calc.py', cfile=__import__('importlib.util').util.cache_from_source('calc.py'))\n"
    "src.write_text(buggy); os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))\n"
    "print('forged')\n")
# pytest's own cache of a rewritten test module: checked against the source's hash only, so easy to forge
FORGED_REWRITE = (
    "import importlib.util, marshal, sys\nfrom pathlib import Path\nfrom _pytest._version import version\n"
    "src = Path('test_calc.py').resolve()\n"
    "code = compile('def test_add():\\n    pass\\n', str(src), 'exec')\n"
    "head = importlib.util.MAGIC_NUMBER + b'\\x03\\0\\0\\0' + importlib.util.source_hash(src.read_bytes())\n"
    "Path('__pycache__').mkdir(exist_ok=True)\n"
    "tag = f'{sys.implementation.cache_tag}-pytest-{version}'\n"
    "Path('__pycache__', f'test_calc.{tag}.pyc').write_bytes(head + marshal.dumps(code))\n"
    "print('forged')\n")
HOST_BYTECODE = ("python -c \"import csv, os, sys; head = os.path.join(os.path.dirname(csv.__file__), '__pycache__'); "
                 "sys.exit(os.path.dirname(csv.__cached__) != head)\"")


@pytest.mark.parametrize(("trick", "cell"), [("hidden conftest", HIDDEN_CONFTEST), ("forged pyc", FORGED_PYC),
                                             ("forged rewritten test", FORGED_REWRITE)])
def test_gates_cannot_pass_on_changes_the_patch_never_shows(tmp_path: Path, buggy_repo: Path, trick: str,
                                                             cell: str) -> None:
    with ScriptedServer([ipython(cell), reply("done")]) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--sandbox", "off", "--gate",
                        PYTEST_GATE + " -p no:cacheprovider", "--gate", HOST_BYTECODE, "--max-gate-retries", "0",
                        "--require-changes")
    assert run.code != 0 and run.result["success"] is False, (trick, run.proc.stderr)
    if trick == "hidden conftest":
        assert run.code == 7 and "conftest.py (hidden from the patch by .gitignore)" in run.result["detail"]
    else:  # the patch shows no change, and the gate ran the sources, not the forged bytecode
        assert run.result["changed_files"] == [] and (run.out / "patch.diff").read_text() == ""
        gate = run.result["gates"][0]
        assert gate["passed"] is False and [f["message"] for f in gate["failures"]] == ["assert -1 == 5"], gate
        # while the interpreter's own standard library is read from its compiled files, not compiled again
        assert run.result["gates"][1]["passed"] is True, run.result["gates"][1]


BRIDGE_ATTACKS = """
import prime_ci.kernel.api as api
def attempt(op, **args):
    try:
        return 'OK ' + repr(api.call(op, **args))[:80]
    except Exception as exc:
        return 'REFUSED ' + str(exc)[:160]
for i in range(3):
    print('model', attempt('child.model', messages=[{'role': 'user', 'content': 'x'}], tools=[], max_tokens=16))
print('forged', attempt('rlm.list', child='sub-00000000', token='0' * 32))
print('signal', attempt('child.event', kind='kernel', pid=1))
print('foreign', attempt('rlm.spawn', task='t', model='anthropic/claude-sonnet-4-5'))
print('replay', attempt('rlm.spawn', task='t', model='replay:/etc/shadow'))
print('replay2', attempt('rlm.spawn', task='t', model='replay:/no/such/file'))
"""


def test_the_root_kernel_cannot_act_as_a_child_or_pick_another_provider(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer([ipython(BRIDGE_ATTACKS), reply("done")]) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, "--max-turns", "2",
                        env={"ANTHROPIC_API_KEY": "sk-ant-operator-key"})
        requests = srv.chat_requests
    assert run.code == 0, run.proc.stderr
    out = next(m["content"] for m in requests[1].body["messages"] if m["role"] == "tool")
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert len(requests) == 2, "child.model from the root kernel made model calls"
    assert run.result["usage"]["model_calls"] == 2
    assert lines["model"].startswith("REFUSED") and "unknown operation" in lines["model"], out
    assert lines["forged"].startswith("REFUSED") and "cannot speak for a child" in lines["forged"], out
    assert lines["signal"].startswith("REFUSED"), out
    assert lines["foreign"].startswith("REFUSED") and "provider" in lines["foreign"], out
    for key in ("replay", "replay2"):  # the same answer whether the file exists or not: nothing was read
        assert lines[key].startswith("REFUSED") and "only models of the run's provider" in lines[key], out
        assert "not found" not in lines[key] and "no assistant messages" not in lines[key]
    assert not (run.out / "children").exists() or not list((run.out / "children").iterdir())


@pytest.mark.parametrize("route", ["direct", "litellm"])
def test_json_nested_200k_deep_is_a_malformed_call_or_a_provider_error(tmp_path: Path, buggy_repo: Path,
                                                                      route: str) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    call = reply(None, [tool_call("ipython", '{"code": ' + deep + "}")], usage={"completion_tokens": 10})
    with ScriptedServer([call, reply("done")]) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
    assert run.code == 0, run.proc.stderr[-2000:]
    told = [e["message"]["content"][0]["text"] for e in run.session()
            if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    attempts = [e["data"]["attempts"] for e in run.session()
                if e.get("customType") == "prime_ci.usage" and "attempts" in e["data"]]
    if route == "direct":  # the call reaches the loop: a malformed call, told to the model
        assert told and "nested too deeply" in told[0], told
    else:  # litellm cannot parse the reply itself: a provider error, retried
        assert attempts[0] == 2 and not told, attempts
    with ScriptedServer(default=raw(200, deep.encode())) as srv:
        body = run_inproc(tmp_path, buggy_repo, srv, "--max-wall", "150s", env={"PRIME_CI_ROUTE": route})
    assert body.code == 4 and body.result["stop_reason"] == "model_error", body.proc.stderr[-2000:]


# a test suite that builds its fixture projects in the worktree (pdm-backend's tests/fixtures/projects/*/.pdm-build/)
FIXTURE_BUILD = ("python -c \"import pathlib; p = pathlib.Path('fixtures/.build/mod.py'); "
                 "p.parent.mkdir(parents=True, exist_ok=True); p.write_text('X = 1\\n')\"")


@pytest.mark.parametrize("planted", [False, True])
def test_what_a_gate_writes_in_ignored_files_is_not_the_models(tmp_path: Path, planted: bool) -> None:
    """pdm-backend's gate builds fixture projects into ignored .pdm-build/ directories of the worktree; the run
    ended with exit 7 "protected path changed: ... (hidden from the patch by .gitignore)" although the model wrote
    none of it. What a gate run creates there is the run's, like a build's output; a module the model planted in a
    cell beside it stays the model's."""
    repo = make_repo(tmp_path / "repo", {**BUGGY, ".gitignore": BUGGY[".gitignore"] + ".build/\n"})
    plant = "from pathlib import Path\nPath('fixtures/.build').mkdir(parents=True, exist_ok=True)\n" \
            "Path('fixtures/.build/planted.py').write_text('Y = 2\\n')\n"
    fix = "from pathlib import Path\np = Path('calc.py')\np.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    steps = [reply("Let me see the gates first."), *([ipython(plant)] if planted else []), ipython(fix), reply("done")]
    with ScriptedServer(steps) as srv:
        run = run_inproc(tmp_path, repo, srv, "--sandbox", "off", "--gate", f"{FIXTURE_BUILD} && {PYTEST_GATE}")
    if planted:
        assert run.code == 7, run.proc.stderr
        assert run.result["flags"] == ["protected path changed: fixtures/.build/planted.py (hidden from the patch by "
                                       ".gitignore)"], run.result["flags"]
    else:
        assert run.code == 0, run.proc.stderr
        assert not run.result["rounds"][0]["passed"] and run.result["flags"] == []
