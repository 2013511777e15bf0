"""harness-pr.md, the body of a harness proposal, written from what the refining model said (its rationale, the
entries' names, evidence and text), rendered with cmark-gfm as GitHub renders it, as written and as the publish
step posts it (issue 37): no link, heading, HTML element or mention from the model, every diff's fold closed."""

from __future__ import annotations

from pathlib import Path

from prime_ci.artifacts import markup
from prime_ci.harness.branch import write_pr_body
from prime_ci.harness.entries import ChangeSet, Op
from rendered import assert_inert

EVIL = "x www.evil.example <img src=x> @octocat fixes #12 [a](https://evil.example/) ``b`` | c"
ENTRY = "Use `pytest -q`. <!--\n````\n# PWNED\n</details>\n[click](https://evil.example/) @octocat -->\n"
HEADINGS = ["Harness refinement proposal", "Rationale", "Operations", "Evidence and diffs", "1.", "2.", "Review"]


def test_harness_pr_md_shows_the_models_words_as_text(tmp_path: Path) -> None:
    ops = (Op("create", "memory", f"m{EVIL}", None, ENTRY, evidence=f"{EVIL}\n# evidence heading\n> {EVIL}"),
           Op("update", EVIL, "n", ENTRY, ENTRY + "more\n", evidence=ENTRY))
    changeset = ChangeSet("cs-1", "2026-01-01T00:00:00Z", f"run{EVIL}", "refine", EVIL, ops)
    path = tmp_path / "harness-pr.md"
    write_pr_body(path, [changeset], f"{EVIL}\n# rationale heading\n```\n<img src=y>")
    written = path.read_text()
    for text in (written, markup.sanitize(written)):
        page = assert_inert(text, headings=HEADINGS, folds=2)
        assert "# PWNED" in page.html and "# rationale heading" in page.html, "shown, as code"
