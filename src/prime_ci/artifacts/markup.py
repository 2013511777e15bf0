"""The one rule for text from the repository, the model or a suite in the markdown prime-ci writes: summary.md,
the pull request's body (and the comment on it), harness-pr.md, bench.md, the step summary. GitHub-flavoured
markdown, as cmark-gfm and then GitHub render it (mentions and issue references are GitHub's own links).

A writer lays out its own markup and puts every untrusted value through one of these:

- :func:`code_span` (:func:`code_cell` in a table): inline code on one line, fenced by a run of backticks longer
  than any inside it; in a table cell a ``|`` is escaped, so it cannot end the cell.
- :func:`fenced`: a block of any text, its fence longer than any run of backticks inside it.
- :func:`text` (:func:`text_cell`): one line of ordinary text. Every character that can start markup is
  backslash-escaped (no HTML, heading, list, quote, table, emphasis, math or link can start), and each word GitHub
  would make a link or a notification of (a URL, ``www.``, an e-mail address, ``@name``, ``#123``, ``GH-123``) is
  a code span.
- :func:`link`: prime-ci's own links (an http(s) URL of a plain shape, or no link).

:func:`sanitize` is the publish step's second look at a whole document it did not write (summary.md as the pull
request's body, harness-pr.md). Fenced blocks and code spans stay exactly as they are (nothing in them renders);
everywhere else HTML, links and images to other hosts, bare URLs, mentions, issue references and closing keywords
become text. It reads blocks and code spans the way cmark-gfm does where that is certain (a fence at column 0
after a blank line, a code span within one line, table cells split first), and where it is not, it makes the
text inert rather than guess: whatever it leaves as code is code to the renderer too.

Standard library only and no prime_ci import: publish/helper.py and action/helper.py run without prime-ci
installed and load this file by its path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

HOSTS = ("github.com", "docs.github.com")
MAX_CHARS = 60_000  # a pull request body or comment holds 65,536 characters
ZWSP = "\u200b"

_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")  # ASCII punctuation: what CommonMark lets a backslash escape
# What can start markup inside a line: escapes, code, emphasis (``_`` only at a word's edge), strikethrough,
# links, images and footnotes, HTML and autolinks, entities, table cells, GitHub's math.
_MARKUP = re.compile(r"[\\`*~\[\]!<>&|$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What starts a block at a line's start: a heading, a list item, a setext underline or thematic break.
_LINE_START = re.compile(r"\A(?:\d{1,9}(?=[.)]))?[#+=.)-]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_TICKS = re.compile(r"`+")
# A word GitHub turns into a link or a notification: URL, www., e-mail, @mention, issue reference.
_RISKY = re.compile(r"://|www\.|@|#\d|gh-\d|mailto:|xmpp:", re.IGNORECASE)
_URL_SHAPE = re.compile(r"https?://(?P<host>[A-Za-z0-9.-]+)(?::\d{1,5})?(?:[/?#][A-Za-z0-9._~!$'*+,;=:/?#%-]*)?")


def one_line(value: object) -> str:
    """``value`` as one line: control characters and every run of whitespace (line breaks too) one space."""
    return " ".join(_CONTROL.sub(" ", str(value)).split())


def code_span(value: object, *, cell: bool = False) -> str:
    """``value`` as one inline code span nothing inside can end (``cell``: for a table cell, ``|`` escaped)."""
    body = one_line(value) or " "
    ticks = "`" * (max((len(run) for run in _TICKS.findall(body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    span = f"{ticks}{pad}{body}{pad}{ticks}"
    return span.replace("|", "\\|") if cell else span


def code_cell(value: object) -> str:
    """:func:`code_span` for a table cell (GFM reads ``\\|`` as ``|`` in a cell, in code too)."""
    return code_span(value, cell=True)


def fenced(value: str, info: str = "text") -> list[str]:
    """``value`` as the lines of a fenced code block it cannot close. Put it at column 0 after a blank line."""
    body = re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", "", re.sub(r"\r\n?", "\n", value)).rstrip("\n")
    ticks = "`" * max(3, max((len(run) for run in _TICKS.findall(body)), default=0) + 1)
    return [ticks + re.sub(r"[^\w+.-]", "", info), body, ticks]


def text(value: object, *, cell: bool = False) -> str:
    """``value`` as one line of ordinary text: every character that can start markup escaped (at the line's
    start too: a heading, list or setext line), words GitHub would link or notify (URLs, ``www.``, e-mail
    addresses, ``@name``, ``#123``, ``GH-123``) as code spans (``cell``: in a table)."""
    words = one_line(value).split(" ")
    line = " ".join(code_span(w, cell=cell) if _RISKY.search(w) else _MARKUP.sub(r"\\\g<0>", w) for w in words)
    return _LINE_START.sub(lambda m: m[0][:-1] + "\\" + m[0][-1], line, count=1)


def text_cell(value: object) -> str:
    return text(value, cell=True)


def link(label: str, url: str) -> str:
    """``[label](url)`` when ``url`` is an http(s) URL of a plain shape (no credentials, spaces, quotes,
    brackets or entities); else the label and the URL as code."""
    if _URL_SHAPE.fullmatch(url):
        return f"[{text(label)}]({url})"
    return f"{text(label)} {code_span(url)}"


# --- the publish step's second look at a whole document ------------------------------------------------------

# Characters a reader must see rather than have obeyed (or not see at all): controls but \t and \n, bidi and
# zero-width format characters, line separators. Shown as <U+XXXX>, never removed: removing one could make the
# text after it the start of a line (a heading) or join two runs of backticks.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2064"
                     "\u2066-\u206f\ufeff]")
_MARKER = re.compile(r"^<!-- /?prime-ci[\w .:/-]{0,100} -->(?:\n|\Z)", re.MULTILINE)  # bench.md's place
_FOLD = re.compile(r"<details>|</details>|<details><summary>(?P<summary>[^<>]*)</summary>")
_OPENING = re.compile(r"(`{3,})[^`]*|(~{3,}).*")
# A table's delimiter row, read loosely (inside quotes and lists too): lines up to a blank line holding one are
# read as table rows, split at each unescaped | before code spans are paired (as GFM splits them).
_DELIMITER = re.compile(r"[ \t>|:+*\d.)-]*-[ \t>|:+*\d.)-]*")
_CELL_EDGE = re.compile(r"(?<!\\)\|")
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*")  # under a line of text: a heading (prime-ci writes none)
_BARE = r"(?P<url>(?:https?|ftp)://[^\s<>`]*)|(?<![A-Za-z0-9])(?P<www>www\.[^\s<>`]*)"
_BARE_URL = re.compile(_BARE, re.IGNORECASE)
_LINK_OR_URL = re.compile(r"(?<!!)\[(?P<label>[^\[\]`<>\\]*)\]\((?P<dest>[^()\s<>`\\]*)\)|" + _BARE, re.IGNORECASE)
_TRAILING = re.compile(r"[.,:;!?)\]'\"*_~\\]+\Z")
_CLOSER = re.compile(r"\b(?=(?:clos|fix|resolv)(?:e|es|ed)?:?\s+(?:[\w.-]+/[\w.-]+)?(?:#|GH-|https?://))(\w)",
                     re.IGNORECASE)
_NOTIFY = re.compile(r"(?<=@)(?=[A-Za-z0-9])|(?<=#)(?=\d)|(?<=\bGH-)(?=\d)", re.IGNORECASE)
_INLINE = re.compile(r"\\[!-/:-@\[-`{-~]|[<&\[\]`~]")  # outside HTML an escape pair stays one
_IN_HTML = re.compile(r"[<&\[\]`~]")  # in an HTML block a backslash escapes nothing
_ENTITY = {"<": "&lt;", "&": "&amp;", "[": "&#91;", "]": "&#93;", "`": "&#96;", "~": "&#126;"}


def sanitize(document: str, hosts: Iterable[str] = HOSTS, *, folds: bool = True, limit: int = MAX_CHARS) -> str:
    """A markdown document made safe to post: outside code, no HTML (but, with ``folds``, the bare
    ``<details>``/``<summary>`` lines prime-ci folds a block in), no link or image to a host outside ``hosts``
    (and GitHub's subdomains), no bare URL to one, no ``@mention``, issue reference or closing keyword, hidden
    characters shown (``<U+202E>``); at most about ``limit`` characters, cut at a line end and the cut said."""
    allowed = {h.lower() for h in hosts}
    source = _prepare(document)
    cut = False
    while len(body := _document(source, allowed, folds)) > limit:
        keep = min(len(source) - 1, len(source) * limit // len(body) - 100)
        source, cut = source[: max(0, source.rfind("\n", 0, max(0, keep)))], True
    return body + ("\n\n(cut: too long to post)\n" if cut else "")


def plain_line(value: str, hosts: Iterable[str] = HOSTS) -> str:
    """One line that is not markdown (a pull request title): hidden characters shown, URLs to other hosts
    removed, mentions, issue references and closing keywords neutralised."""
    allowed = {h.lower() for h in hosts}
    line = _CLOSER.sub(_break, " ".join(_prepare(value).split()))
    out, pos = [], 0
    for match in _BARE_URL.finditer(line):
        out += [_notify_nobody(line[pos:match.start()]), _url(match, allowed, _notify_nobody, str)]
        pos = match.end()
    return "".join([*out, _notify_nobody(line[pos:])])


def _prepare(document: str) -> str:
    document = _MARKER.sub("", re.sub(r"\r\n?", "\n", document))
    return _HIDDEN.sub(lambda m: f"<U+{ord(m[0]):04X}>", document)


def _document(source: str, allowed: set[str], folds: bool) -> str:
    out: list[str] = []
    run: list[str] = []  # the lines since the last blank line or fenced block
    fence: tuple[str, int] | None = None  # the open fenced block's character and length
    open_folds = [0]
    for line in source.split("\n"):
        if fence is not None:
            out.append(line)
            if re.fullmatch(f" {{0,3}}{fence[0]}{{{fence[1]},}}[ \t]*", line):
                fence = None
        elif not line.strip(" \t"):
            out += [*_run(run, allowed, open_folds if folds else None), ""]
            run = []
        elif not run and (opening := _OPENING.fullmatch(line)):
            ticks = opening[1] or opening[2]
            fence = (ticks[0], len(ticks))
            out.append(line)
        else:
            run.append(line)
    out += _run(run, allowed, open_folds if folds else None)
    if fence is not None:  # what follows (the footer, the cut note) must not be code
        out.append(fence[0] * fence[1])
    return "\n".join(out + ["", "</details>"] * open_folds[0])


def _run(lines: list[str], allowed: set[str], open_folds: list[int] | None) -> list[str]:
    """Lines up to a blank line: an HTML block when the first is a fold line (``open_folds``: how many folds are
    open; one closed that is not is text), else inline text (table rows when a line could be a delimiter row)."""
    if not lines:
        return []
    fold = _FOLD.fullmatch(lines[0]) if open_folds is not None else None
    if fold and open_folds is not None and (lines[0] != "</details>" or open_folds[0] > 0):
        open_folds[0] += -1 if lines[0] == "</details>" else 1
        head = lines[0]
        if fold["summary"] is not None:
            head = f"<details><summary>{_inert(fold['summary'], allowed, html=True)}</summary>"
        return [head, *(_inert(line, allowed, html=True) for line in lines[1:])]
    table = any(_DELIMITER.fullmatch(line) for line in lines)
    return [re.sub("[=-]", r"\\\g<0>", line, count=1) if i and _SETEXT.fullmatch(line) else
            "|".join(_inline(cell, allowed) for cell in (_CELL_EDGE.split(line) if table else [line]))
            for i, line in enumerate(lines)]


def _inline(line: str, allowed: set[str]) -> str:
    """Code spans paired as CommonMark pairs them (within this line) and kept; the text between made inert."""
    out: list[str] = []
    start = i = 0
    while i < len(line):
        if line[i] == "\\" and _PUNCT.match(line, i + 1):
            i += 2
        elif line[i] != "`":
            i += 1
        else:
            opener = len(_TICKS.match(line, i)[0])  # type: ignore[index]
            closer = next((m for m in _TICKS.finditer(line, i + opener) if len(m[0]) == opener), None)
            if closer is None:  # a run nothing closes is text
                i += opener
                continue
            out += [_inert(line[start:i], allowed, html=False), line[i:closer.end()]]
            start = i = closer.end()
    return "".join([*out, _inert(line[start:], allowed, html=False)])


def _inert(piece: str, allowed: set[str], *, html: bool, links: bool = True) -> str:
    """Text (no code in it) made inert: a link kept only to an allowed host, a bare URL to another removed, HTML
    and link brackets as entities, nobody notified."""
    out, pos = [], 0
    piece = _CLOSER.sub(_break, piece)  # before the piece is split at its links: "fixes https://..."
    for match in (_LINK_OR_URL if links and not html else _BARE_URL).finditer(piece):
        if match.groupdict().get("label") is None:
            # cmark-gfm's autolinks run on over what follows (a backtick, an escape): an allowed URL is put in <>
            kept = _url(match, allowed, lambda text: _plain(text, html),
                        (lambda url: _plain(url, html)) if html else "<{}>".format)
        elif _allowed(match["dest"], allowed):
            kept = f"[{_inert(match['label'], allowed, html=html, links=False)}]({match['dest']})"
        else:  # its brackets become entities; a URL in it is read on its own
            kept = _inert(match[0], allowed, html=html, links=False)
        out += [_plain(piece[pos:match.start()], html), kept]
        pos = match.end()
    return "".join([*out, _plain(piece[pos:], html)])


def _url(match: re.Match[str], allowed: set[str], plain: Callable[[str], str], keep: Callable[[str], str]) -> str:
    """A bare URL or ``www.`` name: ``keep`` it when its host is allowed, else say it was removed; trailing
    punctuation is text."""
    raw = match["url"] or match["www"]
    tail = _TRAILING.search(raw)
    url, rest = (raw[: tail.start()], tail[0]) if tail else (raw, "")
    if match["url"] and _allowed(url, allowed):
        return keep(url) + plain(rest)
    host = re.match(r"(?:[a-z]+://)?([A-Za-z0-9.-]*)", url, re.IGNORECASE)
    name = re.sub(r"^(?:www\.)+", "", host[1] if host else "", flags=re.IGNORECASE).strip(".")
    return f"(link removed{': ' + name if name else ''})" + plain(rest)


def _allowed(url: str, allowed: set[str]) -> bool:
    shape = _URL_SHAPE.fullmatch(url)
    host = shape["host"].lower() if shape else ""
    return bool(host) and (host in allowed or host.endswith(".github.com"))


def _break(match: re.Match[str]) -> str:
    return match[1] + ZWSP


def _notify_nobody(piece: str) -> str:
    """A zero-width space after ``@``, and after ``#`` or ``GH-`` before a digit: GitHub links and notifies
    nobody (closing keywords get theirs from ``_CLOSER``)."""
    return _NOTIFY.sub(ZWSP, piece)


def _plain(piece: str, html: bool) -> str:
    """Text: HTML, link brackets, backticks and tildes as entities (outside HTML an escape pair stays)."""
    return (_IN_HTML if html else _INLINE).sub(lambda m: m[0] if len(m[0]) == 2 else _ENTITY[m[0]],
                                                _notify_nobody(piece))
