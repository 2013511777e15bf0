"""JUnit XML in and out: failures from a project's report, one report over the gates, GitHub annotations.

Also holds the small helpers (middle clipping, stack-frame locations) that :mod:`prime_ci.gates` and
:mod:`prime_ci.gates.failures` (failing tests parsed from a gate's log) share.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import junit_xml

from prime_ci.durations import format_duration
from prime_ci.isolation import durable
from prime_ci.isolation.paths import relative_inside
from prime_ci.isolation.untrusted import strip_ansi
from prime_ci.isolation.workflow_commands import command

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_REPORT_BYTES = 50 * 1024 * 1024
FAILURE_TEXT_LIMIT = 2048
JUNIT_OUTPUT_LIMIT = 8192

_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_LOCATION = re.compile(r"(?m)^([^\s:][^\s:]*\.[A-Za-z0-9]+):(\d+):")
_RUNNER_FRAME = re.compile(r"^[ \t]*at (?:.*\()?(?:node:|.*/node_modules/).*\n?", re.M)
_FRAME = re.compile(r"\(((?:file://)?[^()\s]+):(\d+):\d+\)|\bat ((?:file://)?[^()\s]+):(\d+):\d+")

Kind = Literal["failure", "error"]


@dataclass
class JUnitFailure:
    """One failing test, from a JUnit report or (:mod:`prime_ci.gates.failures`) from a gate's log."""

    test: str
    kind: Kind
    message: str
    text: str
    file: str | None = None
    line: int | None = None



class GateResult(Protocol):
    """What this module reads of a gate run (``prime_ci.gates.runner.GateResult``), without importing the runner."""

    name: str
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    output: str
    output_bytes: int
    duration_s: float
    attempts: int
    flaky: bool
    timeout_s: float | None
    failures_source: Literal["junit", "log"] | None
    more_failures: int

    @property
    def failures(self) -> list[JUnitFailure]: ...

def clip_middle(text: str, limit: int, unit: str = "chars", total: int | None = None) -> str:
    """Keep head and tail of ``text`` within ``limit`` chars, with a marker naming what was cut.

    ``total``: the size of the original when ``text`` is itself already clipped (a gate's output), so
    the marker names everything that is missing.
    """
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    size = max(len(text), total or 0)
    longest = f"\n[... {size} {unit} elided ...]\n"
    keep = limit - len(longest)
    if keep <= 0:
        return text[:limit]
    head = keep // 2
    tail = keep - head
    return text[:head] + f"\n[... {size - keep} {unit} elided ...]\n" + (text[-tail:] if tail else "")


def xml_safe(text: str) -> str:
    """Drop characters XML 1.0 cannot carry (control characters, lone surrogates, U+FFFE/FFFF)."""
    return _XML_ILLEGAL.sub("", text)


def relative(path: str, bases: tuple[Path, ...]) -> str:
    """``path`` (maybe a ``file://`` URL) relative to the first base it lies under, else as given."""
    path = path.removeprefix("file://")
    if path.startswith("/"):
        for base in bases:
            if (rel := relative_inside(base, path)) is not None:
                return str(rel)
    return path.removeprefix("./")


def stack_location(text: str, bases: tuple[Path, ...] = ()) -> tuple[str, int] | None:
    """The first JavaScript stack frame in ``text`` outside node internals and ``node_modules``."""
    for m in _FRAME.finditer(text):
        path = m[1] or m[3]
        if path.startswith(("node:", "internal/")) or "node_modules/" in path:
            continue
        return relative(path, bases), int(m[2] or m[4])
    return None


def _location(case: ET.Element, text: str, bases: tuple[Path, ...]) -> tuple[str | None, int | None]:
    file = case.get("file")
    line_attr = case.get("line")
    line = int(line_attr) if line_attr and line_attr.isdigit() else None
    if file:
        return relative(file, bases), line
    matches = _LOCATION.findall(text)
    relative_matches = [m for m in matches if not m[0].startswith("/")]
    if pick := (relative_matches or matches or [None])[-1]:
        return relative(pick[0], bases), int(pick[1])
    return stack_location(text, bases) or (None, None)


def _pytest_node(dotted: str, rest: list[str], cwd: Path) -> str | None:
    """``tests.test_x.TestC`` + ``[test_y]`` as ``tests/test_x.py::TestC::test_y`` when that file exists."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if (cwd / path).is_file():
            return "::".join([path, *parts[i:], *rest])
    return None


def _test_name(case: ET.Element, root: ET.Element, cwd: Path | None, parents: dict[ET.Element, ET.Element]) -> str:
    name = case.get("name", "?")
    classname = case.get("classname") or ""
    if cwd is not None and (node := _pytest_node(classname, [name], cwd) if classname else _pytest_node(name, [], cwd)):
        return node
    if classname == "test":  # node's junit reporter: a fixed classname, describe() blocks as nested suites
        if not parents:
            parents.update((child, parent) for parent in root.iter() for child in parent)
        suites: list[str] = []
        element = parents.get(case)
        while element is not None and element.tag == "testsuite" and len(suites) < 20:
            suites.insert(0, element.get("name", ""))
            element = parents.get(element)
        return " > ".join([*suites, name])
    if name == classname or (classname and name.startswith(classname + " ")):  # jest-junit
        return name
    return f"{classname}::{name}" if classname else name


def parse_junit_failures(path: Path, limit: int = 200, *, cwd: Path | None = None) -> list[JUnitFailure]:
    """Failures and errors from a JUnit XML report (``<testsuites>`` or a bare ``<testsuite>``).

    ``cwd``: the directory the tests ran in. Absolute paths under it are made relative, and pytest's
    ``classname``/``name`` pairs become runnable node ids (``tests/test_x.py::TestC::test_y``) when the
    module file exists there.

    Raises ValueError for documents with a DOCTYPE/ENTITY (entity expansion), non-UTF-8/ASCII-compatible
    encodings (where that check cannot be made on bytes), oversized files or another root element; and
    ``xml.etree.ElementTree.ParseError`` for malformed XML.
    """
    if path.stat().st_size > MAX_REPORT_BYTES:
        raise ValueError(f"{path}: JUnit report larger than {MAX_REPORT_BYTES} bytes")
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data:
        raise ValueError(f"{path}: JUnit report is not in an ASCII-compatible encoding")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise ValueError(f"{path}: JUnit report with DOCTYPE/ENTITY declarations refused")
    root = ET.fromstring(data)
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"{path}: not a JUnit report (root element <{root.tag}>)")
    bases = (cwd, cwd.resolve()) if cwd is not None else ()
    failures: list[JUnitFailure] = []
    parents: dict[ET.Element, ET.Element] = {}
    for case in root.iter("testcase"):
        if case.find("skipped") is not None:  # node marks a failing todo() test skipped
            continue
        for child in case:
            if child.tag not in ("failure", "error"):
                continue
            text = _RUNNER_FRAME.sub("", child.text or "").strip()
            file, line = _location(case, text, bases)
            first = next((t.strip() for t in text.splitlines() if t.strip()), "")
            kind: Kind = "failure" if child.tag == "failure" else "error"
            failures.append(
                JUnitFailure(
                    test=_test_name(case, root, cwd, parents),
                    kind=kind,
                    message=clip_middle(child.get("message") or first or child.get("type") or "", 500),
                    text=clip_middle(text, FAILURE_TEXT_LIMIT),
                    file=file,
                    line=line,
                )
            )
            if len(failures) >= limit:
                return failures
    return failures


def failure_lines(result: GateResult, *, max_lines: int = 50) -> list[str]:
    """One line per failing test (``test: message (file:line)``), from the JUnit report or the full log."""
    lines = []
    for f in result.failures[:max_lines]:
        where = f" ({f.file}:{f.line})" if f.file and f.line else ""
        message = f.message.strip().splitlines()[0] if f.message.strip() else f.kind
        lines.append(clip_middle(f"{f.test}: {message}{where}", 300))
    return lines


def ended(exit_code: int | None, timed_out: bool, timeout_s: float | None, *, code: str = "exit") -> str:
    """How a gate, setup or build command ended, in words: ``exit 3`` or ``timed out after 10m``."""
    if timed_out:
        if not timeout_s:
            return "timed out"
        return f"timed out after {format_duration(timeout_s)}"
    return f"{code} {exit_code}"


def status_text(result: GateResult) -> str:
    return ended(result.exit_code, result.timed_out, result.timeout_s, code="exit code")


def _failure_output(result: GateResult) -> str:
    lines = failure_lines(result)
    listing = "failing tests:\n" + "".join(f"- {line}\n" for line in lines) + "\n" if lines else ""
    listing = clip_middle(listing, JUNIT_OUTPUT_LIMIT // 2)
    room = JUNIT_OUTPUT_LIMIT - len(listing) - 20
    output = strip_ansi(result.output)
    while True:  # the limit is in bytes: shrink until multi-byte text fits too
        text = listing + "output:\n" + clip_middle(output, room, "bytes", result.output_bytes)
        excess = len(text.encode()) - JUNIT_OUTPUT_LIMIT
        if excess <= 0 or room <= 0:
            return text.encode()[:JUNIT_OUTPUT_LIMIT].decode(errors="ignore")
        room -= max(excess, 16)


def write_gates_junit(results: Sequence[GateResult], path: Path, *, suite: str = "prime-ci gates") -> None:
    """One testcase per gate; failures carry bounded output; flaky gates get a ``flaky`` property.

    Written (redacted) through ``isolation.durable``: an unwritable PATH raises ``PersistenceError``."""
    cases = []
    for r in results:
        case = junit_xml.TestCase(xml_safe(r.name), classname="prime-ci.gates", elapsed_sec=round(r.duration_s, 3))
        if not r.passed:
            case.add_failure_info(
                message=xml_safe(f"{clip_middle(r.command, 200)}: {status_text(r)}"),
                output=xml_safe(_failure_output(r)),
                failure_type="timeout" if r.timed_out else "gate-failed",
            )
        cases.append(case)
    text = junit_xml.to_xml_report_string([junit_xml.TestSuite(xml_safe(suite), cases)], prettyprint=False)
    root = ET.fromstring(text)
    for element in root.iter():
        element.attrib.pop("disabled", None)
        if element.tag in ("testsuite", "testsuites"):
            element.set("time", str(round(sum(r.duration_s for r in results), 3)))
    for element, r in zip(root.iter("testcase"), results, strict=True):
        element.set("time", str(round(r.duration_s, 3)))
        if r.flaky or r.attempts > 1:
            props = ET.Element("properties")
            if r.flaky:
                ET.SubElement(props, "property", {"name": "flaky", "value": "true"})
            ET.SubElement(props, "property", {"name": "attempts", "value": str(r.attempts)})
            element.insert(0, props)
    ET.indent(root)
    durable.write(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")


def repository_path(path: str | None, root: Path | None) -> str | None:
    """``path`` relative to the repository root, or None when it is not a path inside it."""
    if not path:
        return None
    path = path.removeprefix("file://")
    if path.startswith("/"):
        rel = None if root is None else relative_inside(root, path)
        if rel is None:
            return None
        path = str(rel)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/".join(parts) if parts and ".." not in parts else None


def github_annotations(results: Sequence[GateResult], *, per_gate: int = 10, root: Path | None = None) -> list[str]:
    """``::error`` workflow commands for failing gates, at the failing test's file and line where the runner named
    them (the file alone where it gave no line), paths relative to the repository root ``root``."""
    out: list[str] = []
    for r in results:
        if r.passed:
            continue
        located = [(f, path) for f in r.failures if (path := repository_path(f.file, root))][:per_gate]
        for f, path in located:
            message = clip_middle(f"{f.test}: {f.message.strip() or f.kind}", 1000)
            out.append(command("error", message, file=path, line=f.line if f.line and f.line > 0 else None,
                               title=clip_middle(f"{r.name}: {f.test}", 200)))
        if located:
            continue
        lines = failure_lines(r, max_lines=20)
        detail = "\n".join(lines) if lines else "\n".join(strip_ansi(r.output).rstrip().splitlines()[-20:])
        message = clip_middle(f"{clip_middle(r.command, 200)}: {status_text(r)}\n{detail}".rstrip(), 2000)
        out.append(command("error", message, title=f"gate {r.name}"))
    return out
