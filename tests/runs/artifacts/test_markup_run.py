"""Issue 37, acceptance 3, from a real run: a protected path holding `` www.evil.example``, ``<!--`` in the patch
and ``-->`` with four backticks in the final message. summary.md, the change PR's body the publish step makes
of it (and the one it makes from result.json alone) and the PR title, rendered with cmark-gfm as GitHub renders
them: no link, heading, HTML element or mention from the run, the patch's fold closed."""

from __future__ import annotations

from pathlib import Path

from conftest import BUGGY, make_repo, repo_script, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply
from rendered import assert_inert

CELL = """import os
open('calc.py', 'w').write('def add(a, b):\\n    return a + b  # <!--\\n')
os.makedirs('x www.evil.example', exist_ok=True)
open('x www.evil.example/conftest.py', 'w').write('# <img src=x> @octocat\\n')
print('ok')"""
FINAL = "Fixed add. -->\n````\n# PWNED\n[click](https://evil.example/) @octocat fixes #1\n</details>\n<img src=x>"
HEADINGS = ["❌ prime-ci", "Task", "Gate rounds", "Gates (last run)", "Changes", "The model's final message",
            "Budget"]


def test_what_a_hostile_run_leaves_renders_as_text(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    with ScriptedServer([ipython(CELL), reply(FINAL)]) as server:
        run = run_inproc(tmp_path, repo, server, task="Fix add. See www.evil.example @octocat #2")
    assert run.code == 7, run.proc.stderr
    assert run.result["detail"] == "protected paths changed: x www.evil.example/conftest.py"
    summary = (run.out / "summary.md").read_text()
    page = assert_inert(summary, headings=HEADINGS, folds=1)
    assert "# &lt;!--" in page.html and "# PWNED" in page.html, "the patch and the final message are whole"

    helper = repo_script("publish/helper.py")
    assert_inert(helper.body(run.result, summary), headings=HEADINGS, folds=1)
    assert_inert(helper.body(run.result), headings=[])
    assert helper.title(run.result, "") == "prime-ci: Fix add. See (link removed: evil.example) @\u200boctocat #\u200b2"
