"""Failing tests found in a gate's full log, whatever the runner printed it.

Recognised: pytest (summary lines, subtests and the FAILURES sections, xdist or not), unittest's runner
(``python -m unittest``, ``setup.py test``, Django's ``manage.py test``), TAP (``node --test``, tape), node's
spec reporter, jest, vitest, ``go test`` and ``cargo test``. The log is read in blocks and never held whole;
lines that can start nothing are skipped by one regular-expression search, and every failure keeps only a
bounded excerpt of its details (:mod:`prime_ci.gates.failure_blocks` reads a failure's lines).
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

from prime_ci.gates.failure_blocks import (
    CARGO,
    FAIL_LINE,
    FEEDERS,
    GO_DONE,
    GO_LOG,
    MESSAGE_LIMIT,
    PYTEST_BANNER,
    PYTEST_HEAD,
    UNITTEST_HEAD,
    Block,
    cargo_message,
    go_log,
    headline,
    indent,
    tap_failure,
    unittest_id,
)
from prime_ci.gates.junit import JUnitFailure, Kind
from prime_ci.isolation.untrusted import strip_ansi

MAX_FAILURES = 50
_LINE = 400
_BLOCK_LINES = 2000
_READ = 1 << 20
_PARTIAL = 64 * 1024
_MAX_SEEN = 100_000

# Lines that may start a failure or carry context for one; everything else is skipped in bulk.
_TRIGGER = re.compile(
    r"^(?:(?:FAILED|ERROR|SUBFAILED)[ (]\S|(?:FAIL|ERROR): \S|FAIL\t"
    r"|=+ .+ =+$|_{3,} .+ _{3,}$|# \S|=== (?:RUN|CONT|NAME) |---- .+ stdout ----$|failures:$"
    r"|[ \t]{4,}\S+\.go:\d+: |[ \t]*(?:not ok\b|# Subtest: |[✖▶●×✗] |FAIL\s|--- (?:FAIL|PASS|SKIP): ))",
    re.M,
)
_PYTEST_SUMMARY = re.compile(r"(FAILED|ERROR|SUBFAILED(\(.*?\))?) ([^\s\[]+(?:\[.*?\])?)(?: - (.*))?$")
_TAP = re.compile(r"(\s*)not ok\b(?:\s+\d+)?(?:\s+-)?\s*(.*)$")
_TAP_DIRECTIVE = re.compile(r"(?<!\\)#\s*(?:SKIP|TODO)\b", re.I)
_TAP_SUBTEST = re.compile(r"(\s*)# Subtest: (.*)$")
_SPEC = re.compile(r"(\s*)✖ (.+?)(?: \([\d.]+m?s\))?(?: # (.*))?$")
_SPEC_SUITE = re.compile(r"(\s*)▶ (.+)$")
_JEST = re.compile(r"(\s*)● (.+)$")
_VITEST_CROSS = re.compile(r"\s*[×✗] (.+?)(?: \d+(?:\.\d+)?m?s)?$")
_GO_FAIL = re.compile(r"(\s*)--- FAIL: (\S+) \(")
_GO_RUN = re.compile(r"=== (?:RUN|CONT|NAME)\s+(\S+)")
_GO_PACKAGE = re.compile(r"FAIL\t(\S+)\t(?:[\d.]+s|\[)")
_GO_MODULE = re.compile(r"^module\s+(\S+)", re.M)


class _Scan:
    """Reads a log's lines: at most one block open; what earlier lines said (suite names...) as state."""

    def __init__(self, cwd: Path | None, limit: int) -> None:
        self.bases = (cwd, cwd.resolve()) if cwd is not None else ()
        self.limit = limit
        self.found: list[JUnitFailure] = []
        self.seen: set[tuple[str, str]] = set()
        self.names: set[str] = set()
        self.block: Block | None = None
        self.tap_stack: list[str] = []
        self.tap_subtests = False
        self.tape_heading = ""
        self.spec_stack: list[str] = []
        self.spec_summary = False
        self.spec_found = False
        self.jest_file = ""
        self.pytest_section = False
        self.pytest_summary = False
        self.pytest_details: dict[str, Block] = {}
        self.go_current = ""
        self.go_logs: dict[str, deque[str]] = {}
        self.go_parents: list[str] = []
        self.vitest_failed = False
        self.weak: list[JUnitFailure] = []
        self.more = 0
        self.go_pending = 0  # failures found since the last package line of ``go test``
        self.go_module: str | None = None
        self.cwd = cwd

    @property
    def full(self) -> bool:
        return len(self.found) >= self.limit

    def add(self, test: str, kind: Kind, message: str, text: str = "", where: tuple[str, int] | None = None) -> None:
        key = (test, message)
        if key in self.seen or len(self.seen) >= _MAX_SEEN:
            return
        self.seen.add(key)
        self.names.add(test)
        if self.full:
            self.more += 1  # named, not kept: counted so that the feedback says how many more there are
            return
        file, line = where or (None, None)
        self.found.append(JUnitFailure(test[:_LINE], kind, message[:MESSAGE_LIMIT], text, file, line or None))

    def feed(self, text: str) -> None:
        pos, end = 0, len(text)
        while pos < end:
            if self.block is None:
                m = _TRIGGER.search(text, pos)
                if m is None:
                    return
                pos = m.start()
            nl = text.find("\n", pos)
            nl = end if nl < 0 else nl
            self.line(text[pos:nl][:_LINE].rstrip())
            pos = nl + 1

    def line(self, s: str) -> None:
        block = self.block
        if block is not None:
            block.lines += 1
            if block.lines <= _BLOCK_LINES and FEEDERS[block.fmt](block, s):
                if block.closed:
                    self.end()
                return
            self.end()
        self.start(s)

    def start(self, s: str) -> None:
        if m := UNITTEST_HEAD.match(s):
            test = unittest_id(m[2], m[3])
            self.open("unittest", test, kind="failure" if m[1] == "FAIL" else "error", state="", sub=m[4] or "")
        elif m := _PYTEST_SUMMARY.match(s):
            if "::" in m[3] or m[3].endswith(".py"):
                self._pytest_summary(m[1], m[2] or "", m[3], (m[4] or "").strip())
        elif m := PYTEST_BANNER.fullmatch(s):
            self.pytest_section = m[1] in ("FAILURES", "ERRORS")
        elif self.pytest_section and (m := PYTEST_HEAD.fullmatch(s)):
            name = re.sub(r"^ERROR (?:at \w+ of|collecting) ", "", m[1])
            self.open("pytest", name, kind="error" if m[1].startswith("ERROR") else "failure")
        elif m := _TAP_SUBTEST.match(s):
            self.tap_subtests = True
            depth = indent(s) // 4
            self.tap_stack = [*self.tap_stack[:depth], m[2].strip()]
        elif m := _TAP.match(s):
            name, skip = m[2], bool(_TAP_DIRECTIVE.search(m[2]))
            name = _TAP_DIRECTIVE.split(name)[0].strip().replace("\\#", "#").replace("\\\\", "\\")
            depth = len(m[1]) // 4
            if self.tap_subtests and len(self.tap_stack) >= depth:
                name = " > ".join([*self.tap_stack[:depth], name])
            self.open("tap", name, len(m[1]), skip=skip, state="start")
        elif s.startswith("# "):
            self.tape_heading = s[2:].strip()
        elif m := _SPEC_SUITE.match(s):
            depth = len(m[1]) // 2
            self.spec_stack = [*self.spec_stack[:depth], m[2].strip()]
        elif m := _SPEC.match(s):
            if m[2] == "failing tests:":
                self.spec_summary = True
                return
            depth = len(m[1]) // 2
            name = " > ".join([*self.spec_stack[:depth], m[2].strip()])
            skip = bool(m[3] and re.match(r"(?i)(TODO|SKIP)\b", m[3])) or (self.spec_summary and self.spec_found)
            self.open("spec", name, len(m[1]), skip=skip)
        elif m := _JEST.match(s):
            name, failed = m[2].strip(), m[2].strip() != "Test suite failed to run"
            name = name if failed else self.jest_file or name
            self.open("jest", name, len(m[1]), kind="failure" if failed else "error", skip=name.startswith("Console"))
        elif m := _GO_PACKAGE.match(s):
            self._go_package(m[1])
        elif m := FAIL_LINE.match(s):
            if " > " in m[1] or m[1].endswith(" ]"):
                self.vitest_failed = True
                self.open("vitest", m[1])
            else:
                self.jest_file = m[1].split(" (")[0]
        elif m := _VITEST_CROSS.match(s):
            self.open("vitest-x", m[1])
        elif m := _GO_FAIL.match(s):
            self.open("go", m[2], len(m[1]))
        elif m := GO_DONE.match(s):
            self.go_logs.pop(m[1], None)
        elif m := _GO_RUN.match(s):
            self.go_current = m[1]
        elif self.go_current and GO_LOG.match(s):
            logs = self.go_logs.setdefault(self.go_current, deque(maxlen=20))
            logs.append(s)
            if len(self.go_logs) > 200:
                del self.go_logs[next(iter(self.go_logs))]
        elif m := CARGO.match(s):
            self.open("cargo", m[1])
        elif s == "failures:":
            self.open("cargo-list", "")

    def _pytest_summary(self, word: str, sub: str, node: str, message: str) -> None:
        """A short-summary line; its details come from the FAILURES section read before it."""
        self.pytest_summary = True
        key = node.split("::", 1)[1].replace("::", ".") if "::" in node else node
        detail = self.pytest_details.pop(key, None)
        if detail is None and sub:  # a subtest's section: ``Class.test (i='0')`` for ``SUBFAILED(i=0)``
            name = next((k for k in self.pytest_details if k.startswith(key + " (")), None)
            detail = self.pytest_details.pop(name) if name else None
        if detail and (not message or message.endswith("...")):
            message = headline(detail.message) or message  # pytest trims the summary to the terminal's width
        message = f"{sub} {message}".strip() if sub else message
        kind: Kind = "error" if word == "ERROR" else "failure"
        self.add(node, kind, message, detail.excerpt.text() if detail else "", detail.where if detail else None)

    def open(self, fmt: str, name: str, column: int = 0, *, kind: Kind = "failure", skip: bool = False,
             state: str = "", sub: str = "") -> None:
        self.block = Block(fmt, name, self.bases, column, kind, skip, state=state, key=sub)

    def end(self) -> None:
        b, self.block = self.block, None
        if b is None or b.skip:
            return
        if b.fmt == "pytest":
            if len(self.pytest_details) < self.limit:
                self.pytest_details[b.name] = b
        elif b.fmt == "tap":
            if tap := tap_failure(b, "" if self.tap_subtests else self.tape_heading):
                self.add(tap[0], "failure", tap[1], b.excerpt.text(), tap[2])
        elif b.fmt == "go":
            self._end_go(b)
        elif b.fmt == "vitest-x":
            self.weak.append(JUnitFailure(b.name, "failure", headline(b.message), "", None, None))
        elif b.fmt == "cargo":
            self.add(b.name, "failure", cargo_message(b), b.excerpt.text(), b.where)
        elif b.fmt == "unittest":
            frame = b.fields.get("frame")
            where = b.where or ((frame[0], int(frame[1])) if frame else None)
            message = headline(b.message[:1]) or b.kind
            self.add(b.name, b.kind, f"{b.key} {message}" if b.key else message, b.excerpt.text(), where)
        elif b.fmt == "cargo-list":
            for name in b.message:
                if name not in self.names:
                    self.add(name, "failure", "")
        elif b.message:
            if b.fmt == "vitest" and b.where is None and " > " in b.name:
                b.where = (b.name.split(" > ", 1)[0], 0)
            if b.fmt == "spec":
                self.spec_found = True
            self.add(b.name, b.kind, headline(b.message), b.excerpt.text(), b.where)

    def close(self) -> list[JUnitFailure]:
        self.end()
        if not self.pytest_summary:
            for name, detail in self.pytest_details.items():
                self.add(name, detail.kind, headline(detail.message), detail.excerpt.text(), detail.where)
        for name in self.go_parents:
            if not any(f.test.startswith(name + "/") for f in self.found):
                self.add(name, "failure", "")
        if not self.vitest_failed:
            for f in self.weak:
                self.add(f.test, f.kind, f.message)
        return self.found

    def _go_package(self, package: str) -> None:
        """go prints file names relative to the package's directory: make them relative to the module's root."""
        if self.go_module is None:
            try:
                text = (self.cwd / "go.mod").read_text(errors="replace") if self.cwd else ""
            except OSError:
                text = ""
            self.go_module = m[1] if (m := _GO_MODULE.search(text)) else ""
        if self.go_module and package.startswith(self.go_module + "/"):
            folder = package.removeprefix(self.go_module + "/")
            for f in self.found[len(self.found) - self.go_pending :]:
                if f.file and "/" not in f.file:
                    f.file = f"{folder}/{f.file}"
        self.go_pending = 0

    def _end_go(self, b: Block) -> None:
        if not b.message:  # go test -v printed the test's log lines before its --- FAIL line
            for s in self.go_logs.pop(b.name, ()):
                b.excerpt.add(s)
                go_log(b, s)
        if b.message:
            before = len(self.found)
            self.add(b.name, b.kind, headline(b.message), b.excerpt.text(), b.where)
            self.go_pending += len(self.found) - before
        elif len(self.go_parents) < self.limit:
            self.go_parents.append(b.name)  # failed through its subtests, or without a message


def _decode(data: bytes) -> str:
    return strip_ansi(data.decode("utf-8", "replace")).replace("\r\n", "\n").replace("\r", "\n")


def scan_log_failures(log_path: Path, *, cwd: Path | None = None, limit: int = MAX_FAILURES) -> list[JUnitFailure]:
    """Failing tests in a log of any size, read in blocks (``cwd``: makes absolute paths relative)."""
    return scan_log(log_path, cwd=cwd, limit=limit)[0]


def scan_log(log_path: Path, *, cwd: Path | None = None, limit: int = MAX_FAILURES) -> tuple[list[JUnitFailure], int]:
    """The first ``limit`` failing tests in a log, and how many more it names."""
    scan = _Scan(cwd, limit)
    try:
        handle = log_path.open("rb")
    except OSError:
        return [], 0
    with handle:
        rest = b""
        while True:
            data = handle.read(_READ)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # one overlong line: keep its head only
                rest = data[:_PARTIAL]
                continue
            rest = data[cut:]
            scan.feed(_decode(data[:cut]))
        if rest:
            scan.feed(_decode(rest))
    return scan.close(), scan.more
