"""Issue 26 acceptance 1 through the CLI (stdout is the point): summary.md shows round 1 red on the failing test and
round 2 green, the diffstat, the patch and the model's final message; in a GitHub Actions job stdout has a group per
setup command and gate run, and a run that ends red an ``::error`` on the failing test's file and line."""

from __future__ import annotations

import re

from conftest import FIX, PYTEST_GATE, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply

# The file the gate fails in sits in a subdirectory, so its path in the annotation is relative to the repository.
FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    x = 2\n    assert add(x, 3) == 5\n",
    ".gitignore": "__pycache__/\n.pytest_cache/\n.prime-ci/\n",
}
GATE = PYTEST_GATE + " -p no:cacheprovider"
ACTIONS = {"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r",
           "GITHUB_RUN_ID": "4242"}
FINAL = "Fixed add(): it subtracted.\n```` still inside ````\n<b>not bold</b> @octocat | a pipe"


def groups(stdout: str) -> list[str]:
    assert stdout.count("::group::") == stdout.count("::endgroup::")
    return re.findall(r"^::group::(.*)$", stdout, re.M)


def test_red_then_green_run_summary_and_actions_log(tmp_path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    server.add(reply("The tests will tell."), ipython(FIX), reply(FINAL))
    run = run_inproc(tmp_path, repo, server, "--gate", GATE, "--setup", "echo preparing", env=ACTIONS)
    assert run.code == 0, run.proc.stderr
    md = (run.out / "summary.md").read_text()

    red = next(line for line in md.splitlines() if line.startswith("| 1 | full |"))
    assert "❌ red" in red and "| `tests/test_calc.py::test_add` | `assert -1 == 5` |" in red
    assert re.search(r"^\| 2 \| full \| ✅ green \|", md, re.M)
    assert "**Time to green:**" in md and "(round 2)" in md
    assert "| `calc.py` | 1 | 1 |" in md
    patch = md[md.index("<details><summary>The patch"):md.index("</details>")]
    assert "-    return a - b\n+    return a + b" in patch
    # the final message in a fence its own four-backtick run cannot close, nothing of it rendered as markup
    message = md[md.index("### The model's final message"):]
    assert "`````text\nFixed add(): it subtracted.\n```` still inside ````\n<b>not bold</b> @octocat | a pipe\n`````" \
        in message
    assert "- [the workflow run](https://github.com/o/r/actions/runs/4242)" in md

    titles = groups(run.proc.stdout)
    assert titles[0].startswith("setup 1/1 ") and ": ok in " in titles[0]
    assert [t.split(":")[0] for t in titles[1:]] == ["gate round 1 (full)", "gate round 2 (fast, 1 test(s))",
                                                   "gate round 2 (full)"]
    assert "red: 1 failing test(s)" in titles[1] and ": green in " in titles[3]
    assert "│ FAILED pytest: tests/test_calc.py::test_add (tests/test_calc.py:6): assert -1 == 5" in run.proc.stdout
    assert "::error" not in run.proc.stdout
    [notice] = re.findall(r"^::notice .*$", run.proc.stdout, re.M)
    assert notice.startswith("::notice title=prime-ci%3A completed::completed (exit 0)")


def test_a_run_that_ends_red_annotates_the_failing_line(tmp_path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    server.add(reply("Nothing to do."), reply("Still nothing."))
    run = run_inproc(tmp_path, repo, server, "--gate", GATE, "--max-turns", "2", env=ACTIONS)
    assert run.code != 0, run.proc.stderr
    assert [t.split(":")[0] for t in groups(run.proc.stdout)] == ["gate round 1 (full)"]
    errors = re.findall(r"^::error .*$", run.proc.stdout, re.M)
    assert errors == ["::error file=tests/test_calc.py,line=6,title=pytest%3A tests/test_calc.py%3A%3Atest_add::"
                      "tests/test_calc.py: :test_add: assert -1 == 5"]  # a message never holds "::"
    assert len(re.findall(r"^::notice ", run.proc.stdout, re.M)) == 1
    assert "| 1 | full | ❌ red |" in (run.out / "summary.md").read_text()


def test_no_workflow_commands_outside_actions(tmp_path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    server.add(reply("Nothing to do."))
    run = run_inproc(tmp_path, repo, server, "--gate", GATE, "--max-turns", "1", env={"GITHUB_ACTIONS": ""})
    assert "::" not in run.proc.stdout
