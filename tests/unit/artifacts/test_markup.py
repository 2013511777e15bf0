"""The one escaping rule (``artifacts.markup``), rendered by cmark-gfm as GitHub renders it: a writer's code
spans, blocks and text show the text as it was and nothing in it becomes markup; the publish step's second look
at a whole document keeps code exactly and leaves no attacker link, heading, element, mention or open fold."""

from __future__ import annotations

import random
import re

import pytest

from prime_ci.artifacts import markup
from rendered import assert_inert, render

# text that would be markup somewhere in GitHub-flavoured markdown, or a link or notification on GitHub
HOSTILE = [
    "www.evil.example", " www.evil.example/x.py", "https://evil.example/x", "see https://evil.example/x.",
    "a@b.example", "mailto:a@b.example", "@octocat", "@org/team", "#12", "o/r#12", "GH-12", "fixes #12", "Closes o/r#3",
    "# heading", "## heading", "<img src=x onerror=alert(1)>", "<!-- hidden", "-->", "</details>", "<details open>",
    "[click](https://evil.example/)", "![pixel](https://evil.example/p.png)", "[x]: https://evil.example/",
    "<https://evil.example/>", "**bold** _em_ ~~del~~", "- item", "1. item", "> quote", "| a | b |", "|---|---|",
    "---", "===", "```", "````", "~~~", "    indented", "`tick", "``a``", "a\\", "\\", "&#64;octocat", "&lt;b&gt;",
    "- [ ] task", "> [!NOTE]", "[^1]", "\\<b>", "\u202eevil\u200b", "x\ry", "\tz",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_text_shows_the_text_and_makes_no_markup(value: str) -> None:
    shown = markup.one_line(value)
    for doc in (markup.text(value), f"before\n{markup.text(value)}", f"| h |\n|---|\n| {markup.text_cell(value)} |"):
        page = assert_inert(doc, headings=[])
        assert page.tags[-1:] != ["a"] and "a" not in page.tags
        assert shown in "".join(page.text).replace("\n", " ") or not shown


@pytest.mark.parametrize("value", [*HOSTILE, "a``b```c", "`x`", "|", "a|`b`|c", ""])
def test_a_code_span_holds_the_whole_text(value: str) -> None:
    for doc in (markup.code_span(value), f"| h |\n|---|\n| {markup.code_cell(value)} |"):
        page = assert_inert(doc, headings=[])
        assert re.findall(r"<code>(.*?)</code>", page.html, re.S) == [_html(markup.one_line(value) or " ")]


def test_a_fenced_block_holds_the_whole_text_inside_a_fold() -> None:
    value = "a\n```\n````` x\n~~~\n</details>\n<!--\n# heading\n[x](https://evil.example/)\r\nend"
    doc = "\n".join(["<details><summary>s</summary>", "", *markup.fenced(value), "", "</details>", "", "## after"])
    page = assert_inert(doc, headings=["after"], folds=1)
    blocks = re.findall(r"<pre[^>]*><code[^>]*>(.*?)</code></pre>", page.html, re.S)
    assert blocks == [_html(value.replace("\r", "")) + "\n"]


def test_prime_cis_own_links_are_plain_urls_or_none() -> None:
    assert markup.link("the run", "https://github.com/o/r/actions/runs/1") == \
        "[the run](https://github.com/o/r/actions/runs/1)"
    assert markup.link("x", "https://github.com@evil.example/") == "x `https://github.com@evil.example/`"
    assert markup.link("x", "javascript:alert(1)") == "x `javascript:alert(1)`"


# --- sanitize: the publish step's second look ------------------------------------------------------------------

def test_sanitize_keeps_code_exactly_and_its_folds_closed() -> None:
    """The issue's three: a URL in a code span, ``<!--`` in the patch and ``-->`` with four backticks in the final
    message, ``</details>``."""
    doc = "\n".join([
        "## ✅ prime-ci", "", "- `see https://evil.example/x` then `<img src=x>`", "",
        "<details><summary>The patch (2 lines)</summary>", "", "```diff", "+x = 1  # <!--", "```", "", "</details>",
        "", "### The model's final message", "", "`````text", "done -->", "````", "# PWNED", "[a](https://evil.example/)",
        "</details>", "`````", "",
    ])
    body = markup.sanitize(doc)
    assert body == doc, "prime-ci's own markup and its code come through unchanged"
    page = assert_inert(body, headings=["✅ prime-ci", "The model's final message"], folds=1)
    assert "see https://evil.example/x" in page.html and "PWNED" in page.html


def test_sanitize_neutralises_what_is_not_code() -> None:
    doc = ("Closes #12, fixes o/r#3 and resolves https://github.com/o/r/issues/4. cc @team, mail a@b.example\n"
           "![i](https://x.example/a.png) <img src=x> <details>d</details> [doc](https://x.example/y) www.x.example "
           "[ok](https://github.com/o/r) <!-- hidden --> &#64;team\n\n<b>block</b>\n")
    body = markup.sanitize(doc)
    page = assert_inert(body, headings=[], links=["https://github.com/o/r/issues/4", "https://github.com/o/r"])
    assert "(link removed: x.example)" in body and "x.example/a.png" not in body
    assert not re.search(r"\b(closes|fixes|resolves)\s", "".join(page.prose), re.IGNORECASE)


def test_sanitize_shows_hidden_characters_rather_than_removing_them() -> None:
    """Removed, a zero-width space or a control character could leave ``#`` at a line's start, or join two
    runs of backticks."""
    body = markup.sanitize("\u200b# not a heading\n`a`\u200b`<img src=x>`\n\x1b[31mred\u202e")
    shown = "".join(assert_inert(body, headings=[]).text)
    assert "<U+200B># not a heading" in shown and "<U+001B>[31m" in shown and "<U+202E>" in shown


def test_sanitize_reads_a_doubtful_construct_as_text() -> None:
    """Where its reading could differ from cmark-gfm's (a fence that interrupts a paragraph or sits in a list, a
    code span across lines or table cells, a fence inside an HTML block), the text is made inert."""
    cases = [
        "para\n```\n<img src=x>\n```\n# h",
        "- item\n  ```\n<img src=x>\n```\n# h",
        "- ```\n<img src=x>\n```",
        "> ```\n<img src=x>\n```",
        "a `b\n<img src=x> c` d",
        "| a | b |\n|---|---|\n| `x | <img src=x>` | y |",
        "| a |\n|---|\n| x |\nnot a pipe `<img src=x> | ` [x](https://evil.example/)",
        "<details>\n```\n<img src=x>\n```\n\nafter @a",
        "  ```\n<img src=x>\n```",
        "~~~ `\n<img src=x>\n~~~",
        "```\nx\n ````\n<img src=x> @octocat",
        "<!--\n```\n-->\n<img src=x>",
        "`` a ` <img src=x> ``b`` c",
        "`<img src=x>`` x",
        "\\`<img src=x>`",
        "x\\\n`<img src=x>`",
        "<details><summary><img src=x> @a</summary>\n<img src=y>\n\n</details>",
        "https://evil.example\\`x`<img src=x>",
        "https://github.com/x`code <img src=x>`",  # an autolink runs on over a backtick or an escape
        "https://github.com/x\\<img src=x>",
        "www.\nwww.>",
    ]
    for doc in cases:
        folds = 1 if doc.startswith("<details>\n") else 0  # a fold left open is closed at the end
        assert_inert(markup.sanitize(doc), headings=["h"], links=["https://github.com/x"], folds=folds)


def test_sanitize_leaves_nothing_live_in_mixed_documents() -> None:
    """Lines of prime-ci's shapes and of an attacker's, mixed at random: whatever comes out is inert."""
    pool = [*HOSTILE, "", "", "```", "````text", "~~~", "<details><summary>s</summary>", "</details>", "| a | b |",
            "|---|---|", "| `x|y` | `<b>` |", "`code <img src=x>`", "- `@octocat`", "> `#12`", "    ```"]
    rng = random.Random(37)
    for _ in range(400):
        doc = "\n".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        page = render(markup.sanitize(doc))
        assert set(page.tags) <= {"p", "h1", "h2", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td",
                                  "code", "pre", "strong", "em", "del", "blockquote", "hr", "input", "details",
                                  "summary", "br"}, (doc, page.html)
        assert not page.links, (doc, page.html)
        assert not any(re.search(r"(?<![\w`])@[A-Za-z0-9]|(?<![\w&])#\d", t) for t in page.prose), (doc, page.html)
        headings = [h for h in page.headings if h not in {"heading", "h"}]
        assert not headings, (doc, page.html)


def test_a_long_document_is_cut_at_a_line_end_outside_code() -> None:
    doc = "## head\n\n```diff\n" + "".join(f"+<!-- line {i} @a\n" for i in range(5000)) + "```\n\n@octocat <b>\n"
    body = markup.sanitize(doc, limit=20_000)
    assert len(body) < 20_100 and body.endswith("\n\n(cut: too long to post)\n")
    assert_inert(body, headings=["head"])
    assert re.search(r"^`{3,}$", body.split("\n\n(cut")[0].splitlines()[-1]), "the open block is closed"


def test_a_title_is_one_plain_line() -> None:
    title = markup.plain_line("Fix #12 for @octocat\nsee https://evil.example/x and https://github.com/o/r\u202e")
    assert title == ("F\u200bix #\u200b12 for @\u200boctocat see (link removed: evil.example) and "
                     "https://github.com/o/r<U+202E>")


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
