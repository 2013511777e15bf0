"""summary.md with hostile text in every field it shows, rendered by cmark-gfm as GitHub renders it: no link,
heading, HTML element or mention from the text, and the patch's fold closes where prime-ci closed it. The
publish step's second look (``markup.sanitize``) leaves it exactly as it is."""

from __future__ import annotations

from typing import Any

from prime_ci.artifacts import markup
from prime_ci.artifacts.report import summary_markdown
from prime_ci.artifacts.summary_parts import SummaryInputs, github_links
from rendered import assert_inert

EVIL = "x www.evil.example <img src=x> @octocat #12 [a](https://evil.example/) `b` | c"
PROTECTED = "x www.evil.example/conftest.py"
PATCH = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
         "-    return a - b\n+    return a + b  # <!--\n")
FINAL = "Fixed. -->\n````\n# PWNED\n[click](https://evil.example/) @octocat fixes #12\n</details>\n<img src=x>"
HEADINGS = ["❌ prime-ci", "Task", "Gate rounds", "Gates (last run)", "Changes", "The model's final message",
            "Sub-agents", "Setup", "Build (last round)", "Budget", "Links"]
ENV = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "9"}


def hostile_result() -> dict[str, Any]:
    command = {"command": EVIL, "passed": False, "exit_code": 1, "timed_out": False, "duration_s": 1.0}
    return {
        "success": False, "stop_reason": "security_stop", "exit_code": 7,
        "detail": f"protected paths changed: {PROTECTED}", "flags": [f"protected path changed: {PROTECTED}", EVIL],
        "task": f"Fix add. {EVIL}\n```\n# task heading", "model": EVIL, "sandbox": EVIL, "base_commit": "a" * 40,
        "dirty": [EVIL], "usage": {"turns": 1, "total_tokens": 10, "cost_usd": None},
        "budgets": {"max_turns": 5, "max_tokens": 100, "max_wall_s": 60.0, "max_cost_usd": None}, "wall_s": 2.0,
        "rounds": [{"round": 1, "kind": "full", "passed": False, "gates": [EVIL], "duration_s": 1.0, "at_s": 1.0}],
        "gates": [{"name": name, "passed": False, "exit_code": 1, "duration_s": 1.0, "command": EVIL}
                  for name in (EVIL, "g`<img src=x>`")],
        "children": [{"name": EVIL, "depth": 1, "status": EVIL, "model_calls": 1, "total_tokens": 1,
                      "cost_usd": None}],
        "changed_files": ["calc.py", PROTECTED], "setup": [{**command, "name": "s"}], "build": [command],
    }


def test_summary_md_shows_hostile_text_as_text() -> None:
    inputs = SummaryInputs(failing=[[{"gate": EVIL, "test": EVIL, "message": EVIL}, {"gate": EVIL, "message": EVIL}]],
                           patch=PATCH, final_message=FINAL, links=github_links(ENV))
    md = summary_markdown(hostile_result(), inputs)
    page = assert_inert(md, headings=HEADINGS, folds=1,
                        links=["https://github.com/o/r/actions/runs/9", "https://github.com/o/r/actions/runs/9#artifacts"])
    assert "<code>www.evil.example/conftest.py</code>" in page.html, "the security-stop line names the path as code"
    assert "# PWNED\n" in page.html and "+    return a + b  # &lt;!--\n" in page.html, "both blocks whole"
    assert markup.sanitize(md) == md, "the publish step finds nothing to change"
