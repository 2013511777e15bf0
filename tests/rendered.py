"""Markdown as GitHub shows it, for the tests that put hostile text into what prime-ci writes: rendered by
cmark-gfm with GitHub's extensions (tables, autolinks, strikethrough, the tag filter, task lists) and raw HTML
passed through so that it can be seen, then read for what text from outside must never become: a link, a
heading, an HTML element, a mention or issue reference (GitHub links those in text outside code and links), or
a ``<details>`` fold that no longer closes where prime-ci closed it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser

import cmarkgfm
from cmarkgfm.cmark import Options

# the elements markdown itself makes; anything else came from raw HTML
MARKDOWN_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th",
                 "td", "code", "pre", "strong", "em", "del", "blockquote", "hr", "br", "a", "input"}
FOLD_TAGS = {"details", "summary"}
# GitHub's mention and issue-reference filters: @name, #123, GH-123, owner/repo#123 in text
NOTIFYING = re.compile(r"(?<![\w`])@[A-Za-z0-9]|(?<![\w&])#\d|\bGH-\d", re.IGNORECASE)


@dataclass
class Page:
    html: str
    tags: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)  # text outside code, pre and links
    text: list[str] = field(default_factory=list)  # all of it, as shown
    folds_opened: int = 0
    folds_closed: int = 0
    headings_in_folds: list[str] = field(default_factory=list)


class _Reader(HTMLParser):
    def __init__(self, page: Page) -> None:
        super().__init__(convert_charrefs=True)
        self.page, self.stack, self.heading = page, [], None  # type: tuple[Page, list[str], list[str] | None]
        self.folds = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append(tag)
        if tag == "a":
            self.page.links.append(dict(attrs).get("href") or "")
        if tag == "details":
            self.page.folds_opened += 1
            self.folds += 1
        if re.fullmatch(r"h[1-6]", tag):
            self.heading = []
        if tag not in {"br", "hr", "input", "img"}:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self.page.folds_closed += 1
            self.folds -= 1
        if re.fullmatch(r"h[1-6]", tag) and self.heading is not None:
            text = "".join(self.heading).strip()
            self.page.headings.append(text)
            if self.folds > 0:
                self.page.headings_in_folds.append(text)
            self.heading = None
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        self.page.text.append(data)
        if self.heading is not None:
            self.heading.append(data)
        if not {"code", "pre", "a"} & set(self.stack):
            self.page.prose.append(data)


def render(markdown: str) -> Page:
    html = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    page = Page(html)
    reader = _Reader(page)
    reader.feed(html)
    reader.close()
    return page


def assert_inert(markdown: str, *, headings: Iterable[str], links: Iterable[str] = (), folds: int = 0) -> Page:
    """Rendered, ``markdown`` has only prime-ci's own markup: its headings (each starts with one of
    ``headings``), links (hrefs among ``links``) and ``folds`` closed ``<details>`` blocks with no heading
    inside; no other HTML element, no mention or issue reference in the prose."""
    page = render(markdown)
    extra = sorted(set(page.tags) - MARKDOWN_TAGS - FOLD_TAGS)
    assert not extra, f"HTML elements from the text: {extra}\n{page.html}"
    strange = [h for h in page.headings if not h.startswith(tuple(headings))]
    assert not strange, f"headings from the text: {strange}\n{page.html}"
    foreign = [href for href in page.links if href not in set(links)]
    assert not foreign, f"links from the text: {foreign}\n{page.html}"
    assert (page.folds_opened, page.folds_closed) == (folds, folds), page.html
    assert not page.headings_in_folds, f"a fold swallowed {page.headings_in_folds}\n{page.html}"
    loud = [m.group() for text in page.prose for m in NOTIFYING.finditer(text)]
    assert not loud, f"mentions or references in the prose: {loud}\n{page.html}"
    return page
