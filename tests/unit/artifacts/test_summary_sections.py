"""summary.md's sections (DESIGN §13), in process: their order, the rounds red to green, the change, the final
message, the sub-agents and the links; and that no text from the repository or the model becomes markup."""

from __future__ import annotations

import re
from typing import Any

from prime_ci.artifacts.report import summary_markdown
from prime_ci.artifacts.summary_parts import (
    PATCH_CHARS,
    SummaryInputs,
    code_cell,
    diffstat,
    fenced,
    github_links,
    plain,
)

PATCH = (
    "diff --git a/calc.py b/calc.py\nindex 1..2 100644\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n"
    "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n"
    "+-- a line that looks like a header\n++++ and another\n"
    "diff --git a/logo.png b/logo.png\nBinary files a/logo.png and b/logo.png differ\n"
)
HOSTILE_TEST = "test_x.py::test_a[<img src=x>|`tick`|@octocat]"


def result(**extra: Any) -> dict[str, Any]:
    usage = {"turns": 3, "total_tokens": 1234, "cost_usd": 0.0123}
    budgets = {"max_turns": 5, "max_tokens": 10_000, "max_wall_s": 600.0, "max_cost_usd": 1.0}
    rounds = [{"round": 1, "kind": "full", "passed": False, "gates": ["pytest"], "duration_s": 2.5, "at_s": 10.0},
              {"round": 2, "kind": "fast", "passed": True, "gates": ["pytest"], "duration_s": 1.0, "at_s": 20.0,
               "tests": 1},
              {"round": 2, "kind": "full", "passed": True, "gates": ["pytest"], "duration_s": 2.0, "at_s": 23.0}]
    children = [{"name": "helper|<b>x</b>", "depth": 1, "status": "completed", "model_calls": 4,
                 "total_tokens": 2000, "cost_usd": 0.004}]
    return {"success": True, "stop_reason": "completed", "exit_code": 0, "detail": "all gates passed",
            "task": "Fix add.\n<script>alert(1)</script> @octocat", "model": "openai/m", "base_commit": "a" * 40,
            "usage": usage, "budgets": budgets, "wall_s": 25.0, "rounds": rounds, "time_to_green_s": 23.0,
            "children": children, "changed_files": ["calc.py", "new.txt", "logo.png"],
            "setup": [{"name": "pip", "command": "pip install -e .", "passed": True, "exit_code": 0,
                       "timed_out": False, "duration_s": 3.0, "log": "setup/pip.log"}], **extra}


def inputs(**extra: Any) -> SummaryInputs:
    failing = [[{"gate": "pytest", "test": HOSTILE_TEST, "message": "assert -1 == 5", "file": "test_x.py", "line": 3},
                {"gate": "pytest", "test": "test_x.py::test_b", "message": "AssertionError: `<!-- x -->`"}], [], []]
    values: dict[str, Any] = {"failing": failing, "patch": PATCH, "final_message": "Done.\n```\n<b>hi</b>",
                              "links": [("the workflow run", "https://github.com/o/r/actions/runs/1")], **extra}
    return SummaryInputs(**values)


def headings(md: str) -> list[str]:
    return [h.split(":")[0] for h in re.findall(r"^#{2,3} (.*)$", md, re.M)]


def test_the_sections_come_in_the_contracts_order() -> None:
    md = summary_markdown(result(), inputs())
    assert headings(md) == ["✅ prime-ci", "Task", "Gate rounds", "Changes", "The model's final message",
                            "Sub-agents", "Setup", "Budget", "Links"]
    assert md.index("**Time to green:**") < md.index("### Changes")


def test_rounds_go_red_to_green_with_the_failing_tests_named() -> None:
    md = summary_markdown(result(), inputs())
    rows = [line for line in md.splitlines() if re.match(r"\| (\d+ )?\|", line)]
    assert rows[0] == f"| 1 | full | ❌ red | {code_cell(HOSTILE_TEST, 200)} | `assert -1 == 5` | 2.5s | 10s |"
    assert rows[1] == "| | | | `test_x.py::test_b` | `` AssertionError: `<!-- x -->` `` | | |"
    assert rows[2] == "| 2 | fast (1 test) | ✅ green |  |  | 1s | 20s |"
    assert rows[3].startswith("| 2 | full | ✅ green |")
    assert "**Time to green:** 23s into the run (round 2)" in md
    never = summary_markdown(result(rounds=result()["rounds"][:1], time_to_green_s=None), inputs())
    assert "**Time to green:** never" in never


def test_more_failing_tests_than_shown_are_counted() -> None:
    many = [{"gate": "pytest", "test": f"t{i}", "message": "m"} for i in range(13)]
    md = summary_markdown(result(), inputs(failing=[many, [], []]))
    assert "`t9`" in md and "`t10`" not in md and "| | | | … and 3 more |  | | |" in md


def test_test_names_and_model_text_cannot_become_markup() -> None:
    md = summary_markdown(result(), inputs())
    cell = code_cell(HOSTILE_TEST, 200)
    assert cell == r"``test_x.py::test_a[<img src=x>\|`tick`\|@octocat]``" and cell in md
    # outside code spans and fences: no tag, no live mention
    prose = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", re.sub(r"(?ms)^(`{3,}).*?^\1$", "", md))
    assert not re.search(r"<(?!/?details>|summary>|/summary>)", prose), prose
    assert "@" not in prose
    assert "```text\nFix add.\n<script>alert(1)</script> @octocat\n```" in md
    assert "| `helper\\|<b>x</b>` | 1 | 4 | 2,000 | $0.004 | `completed` |" in md


def test_the_change_is_a_diffstat_and_a_collapsed_patch() -> None:
    assert diffstat(PATCH) == [("calc.py", 1, 1, False), ("new.txt", 2, 0, False), ("logo.png", 0, 0, True)]
    md = summary_markdown(result(), inputs())
    assert "### Changes: 3 file(s), +3 −1" in md and "| `logo.png` | binary |  |" in md
    block = md[md.index("<details><summary>The patch"):md.index("</details>")]
    assert block.startswith("<details><summary>The patch (17 lines)</summary>\n\n```diff\n") and PATCH in block


def test_a_long_patch_is_cut_and_the_cut_said() -> None:
    patch = PATCH + "".join(f"+line {i}\n" for i in range(10_000))
    md = summary_markdown(result(), inputs(patch=patch))
    block = md[md.index("<details>"):md.index("</details>")]
    assert f"cut at {PATCH_CHARS:,} characters" in block and "patch.diff" in block
    assert len(block) < PATCH_CHARS + 1000 and "+line 9999" not in block
    assert len(md) < 60_000, "a pull request body holds 65,536 characters"


def test_the_final_message_is_fenced_so_it_cannot_close_its_fence() -> None:
    md = summary_markdown(result(), inputs(final_message="a\n`````\n<details>\n`` x"))
    assert "``````text\na\n`````\n<details>\n`` x\n``````" in md
    assert fenced("no ticks") == ["```text", "no ticks", "```"]
    assert "### The model's final message\n\n(none)" in summary_markdown(result(), inputs(final_message=None))


def test_plain_text_escapes_markup_and_mentions() -> None:
    assert plain("paths: a_b.py <b>x</b> @octo-cat | `c` ![i](u)") == \
        r"paths: a_b.py \<b\>x\</b\> `@octo-cat` \| \`c\` \!\[i\](u)"
    assert plain("# heading") == r"\# heading"


def test_links_need_the_jobs_variables() -> None:
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "7"}
    assert github_links(env) == [("the workflow run", "https://github.com/o/r/actions/runs/7"),
                                 ("its artifacts", "https://github.com/o/r/actions/runs/7#artifacts")]
    assert github_links({**env, "GITHUB_RUN_ATTEMPT": "2"})[0][1].endswith("/runs/7/attempts/2")
    assert github_links({**env, "GITHUB_RUN_ID": ""}) == []
    assert github_links({**env, "GITHUB_SERVER_URL": "javascript:alert(1)//"}) == []
    assert github_links({**env, "GITHUB_REPOSITORY": "o/r) [x](http://evil"}) == []
    md = summary_markdown(result(), inputs())
    assert md.rstrip().endswith("- [the workflow run](https://github.com/o/r/actions/runs/1)")


def test_the_sandbox_line_is_whole_and_long_text_is_cut_at_a_word() -> None:
    status = ("on (bubblewrap: no network, read-only host, private /tmp, PID and user namespaces, no capabilities, "
              "seccomp, host uid 1879051292)")
    md = summary_markdown(result(sandbox=status), inputs())
    assert f"**Sandbox:** `{status}`" in md
    long = "word " * 200
    assert code_cell(long, 120) == "`" + "word " * 23 + "word…`" and plain(long, 600).endswith(" word…")
