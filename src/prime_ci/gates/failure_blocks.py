"""The lines of one failing test's block in a log, read per runner (used by :mod:`prime_ci.gates.failures`).

A block starts at a line :mod:`prime_ci.gates.failures` recognises (``not ok``, ``--- FAIL:``, ``● ...``); each
``feed_*`` function takes the block's next line and answers whether it still belongs to the block,
collecting the message, the location and a bounded excerpt on the way.
"""

from __future__ import annotations

import re
import textwrap
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.gates.junit import FAILURE_TEXT_LIMIT, Kind, relative, stack_location

MESSAGE_LIMIT = 500

PYTEST_BANNER = re.compile(r"=+ (.+?) =+$")
# a long test id leaves room for one "_" each side; "_ _ _ _" alone separates traceback entries
PYTEST_HEAD = re.compile(r"_+ (?![_ ]+$)(.+?) _+$")
FAIL_LINE = re.compile(r"\s*FAIL\s+(.+?)\s*$")
GO_DONE = re.compile(r"\s*--- (?:FAIL|PASS|SKIP): (\S+)")
GO_LOG = re.compile(r"\s+(\S+\.go):(\d+): (.*)$")
CARGO = re.compile(r"---- (.+?) stdout ----$")
_PYTEST_WHERE = re.compile(r"([^\s:]+):(\d+): ")
_YAML_KEY = re.compile(r"([A-Za-z_][\w-]*):(?: (.*))?$")
_LOCATION = re.compile(r"(.+):(\d+):\d+$")
_BATS_WHERE = re.compile(r"\(in test file (\S+), line (\d+)\)")
_VITEST_WHERE = re.compile(r"\s*❯ (\S+):(\d+):\d+")
_VITEST_END = re.compile(r"\s*(?:⎯|(?:Test Files|Tests)\s+\d)")
_GO_END = re.compile(r"(?:FAIL|ok)\b|exit status")
_GO_FRAME = re.compile(r"\t(\S+_test\.go):(\d+)")
_CARGO_PANIC = re.compile(r"thread '.*?'(?: \(\d+\))? panicked at (.*)$")
UNITTEST_HEAD = re.compile(r"(FAIL|ERROR): (\S+) \(([\w.]+)\)(?: (\(.*\)))?$")
_CARGO_WHERE = re.compile(r"(?:^|', )(\S+?):(\d+):\d+:?$")
_CARGO_LISTED = re.compile(r" {4}(\S+)")
_UNITTEST_RULE = re.compile(r"(?:={70}|-{70})")
_PY_FRAME = re.compile(r'  File "(.+?)", line (\d+)(?:, in .*)?$')
_PY_CHAIN = ("Traceback (most recent call last):", "During handling of the above exception",
             "The above exception was the direct cause")
_NODE_NOISE = re.compile(r"node:internal|\(node:|^\s*(?:duration_ms|failureType):|/node_modules/")


class Excerpt:
    """The head and tail lines of a failure's details, within the text limit."""

    def __init__(self) -> None:
        self.half = FAILURE_TEXT_LIMIT // 2 - 20
        self.head: list[str] = []
        self.tail: deque[str] = deque()
        self.head_size = self.tail_size = self.dropped = 0

    def add(self, line: str) -> None:
        if not self.tail and self.head_size + len(line) < self.half:
            self.head.append(line)
            self.head_size += len(line) + 1
            return
        self.tail.append(line)
        self.tail_size += len(line) + 1
        while self.tail_size > self.half:
            self.tail_size -= len(self.tail.popleft()) + 1
            self.dropped += 1

    def text(self) -> str:
        gap = [f"[... {self.dropped} lines elided ...]"] if self.dropped else []
        return textwrap.dedent("\n".join([*self.head, *gap, *self.tail])).strip("\n")[:FAILURE_TEXT_LIMIT]


@dataclass
class Block:
    """One failure being read: ``fmt`` names the runner's format (a key of ``FEEDERS``)."""

    fmt: str
    name: str
    bases: tuple[Path, ...] = ()
    indent: int = 0
    kind: Kind = "failure"
    skip: bool = False
    excerpt: Excerpt = field(default_factory=Excerpt)
    message: list[str] = field(default_factory=list)
    where: tuple[str, int] | None = None
    fields: dict[str, list[str]] = field(default_factory=dict)  # TAP's YAML diagnostics
    key: str = ""
    col: int = -1
    state: str = ""
    lines: int = 0
    closed: bool = False

    def at(self, path: str, line: str) -> tuple[str, int]:
        return relative(path, self.bases), int(line)


def headline(lines: list[str]) -> str:
    """The first non-blank line, joined with the next when it ends in a colon (``... equal:`` / ``1 !== 2``)."""
    found = [s.strip() for s in lines if s.strip()][:2]
    if not found:
        return ""
    text = " ".join(found) if found[0].endswith(":") and len(found) > 1 else found[0]
    return text[:MESSAGE_LIMIT]


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _scalar(lines: list[str]) -> list[str]:
    """A YAML value's lines: a block scalar's body, or a quoted/plain inline value unquoted."""
    if not lines:
        return []
    first = lines[0].strip()
    if first[:1] in ("|", ">"):
        return lines[1:]
    if len(first) > 1 and first[0] == first[-1] and first[0] in "'\"":
        first = first[1:-1].replace("''", "'") if first[0] == "'" else first[1:-1]
    return [first, *lines[1:]]


def feed_pytest(b: Block, s: str) -> bool:
    if PYTEST_HEAD.fullmatch(s) or PYTEST_BANNER.fullmatch(s):
        return False
    b.excerpt.add(s)
    if s.startswith("E ") and not b.message:
        b.message.append(s[1:].strip())
    if m := _PYTEST_WHERE.match(s):
        b.where = (m[1], int(m[2]))
    return True


def feed_tap(b: Block, s: str) -> bool:
    if b.state in ("start", "comments") and s.startswith("# ") and not s.startswith("# Subtest: "):
        b.state = "comments"  # diagnostics as comments (bats): `# (in test file x.bats, line 5)`
        b.excerpt.add(s[2:])
        if m := _BATS_WHERE.match(s[2:]):
            b.where = b.where or b.at(m[1], m[2])
        else:
            b.message.append(s[2:])
        return True
    if b.state in ("start", "comments"):  # YAML diagnostics follow the `not ok` line, or nothing does
        if b.state == "comments" or s.strip() != "---" or indent(s) <= b.indent:
            return False
        b.state, b.indent = "yaml", indent(s)
        return True
    if s.strip() == "..." and indent(s) == b.indent:
        b.closed = True
        return True
    if b.key == "" and s.strip():
        b.col = indent(s)
    body = s[b.col :] if b.col >= 0 else s.strip()
    if m := _YAML_KEY.match(body):
        b.key = m[1]
        b.fields[b.key] = [m[2] or ""]
    elif b.key and len(b.fields[b.key]) < 40:
        b.fields[b.key].append(body[2:])
    if not _NODE_NOISE.search(body):
        b.excerpt.add(body)
    return True


def tap_failure(b: Block, heading: str) -> tuple[str, str, tuple[str, int] | None] | None:
    """Name, message and location of a TAP failure; None for a parent that failed only through subtests.

    ``heading``: tape's ``# name`` comment before the assertion (tape names the assertion, not the test).
    """
    get = b.fields.get
    if "subtestsFailed" in "".join(get("failureType", [])):
        return None
    message, name = headline(_scalar(get("error") or get("message") or []) or b.message), b.name
    if heading:
        name, message = heading, message or b.name
    expected, actual = get("expected", []), get("actual", [])
    if len(expected) == len(actual) == 1 and _scalar(actual)[0] not in message:
        message = f"{message} (expected {expected[0].strip()}, actual {actual[0].strip()})".strip()
    located = _scalar(get("location", []))
    where = b.at(m[1], m[2]) if located and (m := _LOCATION.match(located[0])) else b.where
    frame = stack_location("\n".join(get("stack", []) + _scalar(get("at", []))), b.bases)
    if frame and (where is None or frame[0] == where[0]):  # the assertion's line in the test's file
        where = frame
    return name, message or "failed", where


def feed_indented(b: Block, s: str) -> bool:
    """node's spec reporter and jest: the block is what is indented below its first line."""
    if s.strip() and indent(s) <= b.indent:
        return False
    if s.strip():
        if len(b.message) < 2:
            b.message.append(s)
        b.where = b.where or stack_location(s, b.bases)
    if not _NODE_NOISE.search(s):
        b.excerpt.add(s)
    return True


def feed_vitest(b: Block, s: str) -> bool:
    if _VITEST_END.match(s) or FAIL_LINE.match(s):
        return False
    if s.strip() and len(b.message) < 2:
        b.message.append(s)
    if b.where is None and (m := _VITEST_WHERE.match(s)):
        b.where = b.at(m[1], m[2])
    b.excerpt.add(s)
    return True


def feed_vitest_cross(b: Block, s: str) -> bool:
    if s.strip().startswith("→"):
        b.message.append(s.strip()[1:].strip())
        return True
    return False


def feed_go(b: Block, s: str) -> bool:
    if b.state == "panic":
        if _GO_END.match(s):
            return False
        if b.where is None and (m := _GO_FRAME.match(s)):
            b.where = b.at(m[1], m[2])
    elif s.startswith("panic: ") and not b.message:
        b.state, b.kind = "panic", "error"
        b.message.append(s)
    elif not s.strip() or indent(s) <= b.indent or GO_DONE.match(s):
        return False
    else:
        go_log(b, s)
    b.excerpt.add(s)
    return True


def go_log(b: Block, s: str) -> None:
    """A ``file_test.go:12: message`` line: the first one is the failure's message and location."""
    if (m := GO_LOG.match(s)) and not b.message:
        b.message.append(m[3])
        b.where = (m[1], int(m[2]))


def feed_cargo(b: Block, s: str) -> bool:
    if CARGO.match(s) or s == "failures:" or s.startswith("test result: "):
        return False
    where = _CARGO_WHERE.search(s)
    if b.state == "message" and where and where[0].startswith("'"):  # an old-style message's last line
        b.where, b.state = b.at(where[1], where[2]), ""
        b.message.append(s[: where.start()])
    elif m := _CARGO_PANIC.match(s):
        rest, where = m[1], _CARGO_WHERE.search(m[1])
        b.where = b.at(where[1], where[2]) if where else None
        if rest.startswith("'"):  # before Rust 1.73: panicked at 'message', file:line:col
            b.message.append(rest[1 : where.start() if where else None])
        b.state = "message" if rest.endswith(":") or not where else ""
    elif s == "stack backtrace:":
        b.state = "backtrace"
    elif b.state == "message" and (not s or s.startswith("note: ")):
        b.state = ""
    elif b.state == "message" and len(b.message) < 4:
        b.message.append(s)
    if b.state != "backtrace":
        b.excerpt.add(s)
    elif s.startswith("note: "):
        b.state = ""
    return True


def cargo_message(b: Block) -> str:
    """The panic message, with ``assert_eq!``'s left and right values."""
    message = headline(b.message[:1])
    if extra := [s.strip().rstrip(",") for s in b.message[1:4] if re.match(r"\s*(left|right):", s)]:
        message += f" ({', '.join(extra)})"
    return message


def feed_cargo_list(b: Block, s: str) -> bool:
    """The names under cargo's second ``failures:`` line (tests run with ``--nocapture`` have no block)."""
    if m := _CARGO_LISTED.fullmatch(s):
        b.message.append(m[1])
    return not s or m is not None


def unittest_id(name: str, where: str) -> str:
    """The runnable dotted id from ``FAIL: name (where)``: Python 3.11+ prints ``test_x (mod.Class.test_x)``,
    earlier ones ``test_x (mod.Class)``; class and module fixtures name their class or module, and a module
    that failed to import is ``name (unittest.loader._FailedTest...)``."""
    if where.startswith("unittest.loader._FailedTest"):
        return name
    if where.endswith("." + name) or name in ("setUpClass", "tearDownClass", "setUpModule", "tearDownModule"):
        return where
    return f"{where}.{name}"


def feed_unittest(b: Block, s: str) -> bool:
    """A ``FAIL:``/``ERROR:`` block of unittest's runner (also Django's): its traceback up to the next rule.

    The message is the last exception's first line; the location the innermost frame inside the project."""
    if _UNITTEST_RULE.fullmatch(s):
        if b.state == "":
            b.state = "body"  # the rule under the header
            return True
        return False
    b.excerpt.add(s)
    if s.startswith(_PY_CHAIN):
        b.message.clear()
        b.state = "frames"
    elif m := _PY_FRAME.match(s):
        path = relative(m[1], b.bases)
        if not path.startswith("/") and "site-packages/" not in path:
            b.where = (path, int(m[2]))
        else:
            b.fields["frame"] = [path, m[2]]  # the innermost frame anywhere: used when none is the project's
    elif s and not s[0].isspace() and len(b.message) < 4:
        b.message.append(s)
    return True


FEEDERS: dict[str, Callable[[Block, str], bool]] = {
    "pytest": feed_pytest, "tap": feed_tap, "spec": feed_indented, "jest": feed_indented, "vitest": feed_vitest,
    "vitest-x": feed_vitest_cross, "go": feed_go, "cargo": feed_cargo, "cargo-list": feed_cargo_list,
    "unittest": feed_unittest,
}
