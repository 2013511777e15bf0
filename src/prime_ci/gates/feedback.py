"""The user message a failed gate round becomes: per failing gate, every failing test first, then its log.

Each failing test is one line (``- name: first assertion line (file:line)``). The names are never cut: when
the room is short the messages are shortened first, and only past ``LISTED`` tests, or when even the names
do not fit, the list ends with a line saying how many more there are. What room is left holds the failures'
excerpts and the head and tail of the gate's output.
"""

from __future__ import annotations

from collections.abc import Sequence

from prime_ci.gates.junit import GateResult, JUnitFailure, clip_middle, status_text
from prime_ci.isolation.untrusted import strip_ansi

LISTED = 50
_NAME = 300
_WIDTHS = (300, 200, 160, 130, 110, 90, 0)


def failure_line(f: JUnitFailure, width: int = 300) -> str:
    """``- test: message (file:line)`` within ``width`` chars, the message shortened before the name."""
    where = f" ({f.file}:{f.line})" if f.file and f.line else (f" ({f.file})" if f.file else "")
    message = f.message.strip().splitlines()[0] if f.message.strip() else f.kind
    name = clip_middle(f.test, _NAME)
    room = width - len(name) - len(where) - 5
    text = f"{name}: {clip_middle(message, room)}" if room >= 20 else name
    return f"- {text}{where}\n"


def listing(result: GateResult, room: int) -> str:
    """Every failing test a gate run names, one line each, within ``room`` chars where the names fit."""
    from_log = result.failures_source == "log"
    label = "failing tests (from the full log):\n" if from_log else "failing tests (JUnit):\n"
    shown = result.failures[:LISTED]
    room -= len(label) + 90  # the label and the closing "and N more" line
    for width in _WIDTHS:  # the widest lines that let every test in
        lines = [failure_line(f, width) for f in shown]
        if sum(map(len, lines)) <= room:
            break
    while lines and sum(map(len, lines)) > room:
        lines.pop()
    more = len(result.failures) - len(lines) + result.more_failures
    if more:
        lines.append(f"- ... and {more} more failing test(s): all are in the log and in `gates.last`\n")
    return label + "".join(lines)


def _gate_section(result: GateResult, budget: int, log_hint: str) -> str:
    footer = f"Full log: {log_hint}{result.name}.log (the full text is available as `gates.last` in the kernel)\n"
    top = f"\n## gate {result.name}: {status_text(result)}\n$ {clip_middle(result.command, 300)}\n"
    room = budget - len(top) - len(footer)
    from_log = result.failures_source == "log"
    body = listing(result, room * 3 // 4) if result.failures else ""
    if result.failures:
        # Tests found in the log may not be the whole story: leave the output a share of the room.
        details = room - len(body) - (room // 4 if from_log else 0)
        per = max(details // len(result.failures[:10]) - 40, 0)
        for f in result.failures[:10]:
            if per > 80 and f.text.strip():
                body += f"\n{f.test}:\n{clip_middle(strip_ansi(f.text).strip(), per)}\n"
    if not result.failures or from_log:
        label = "\noutput (head+tail):\n" if body else "output (head+tail):\n"
        rest = room - len(body) - len(label)
        if rest > 200 or not result.failures:
            body += label + clip_middle(strip_ansi(result.output), max(rest, 0), "bytes", result.output_bytes)
            body = body if body.endswith("\n") else body + "\n"
    section = top + body
    if len(section) + len(footer) > budget:
        section = section[: max(budget - len(footer), 0)]
    return (section + footer)[:budget]


def feedback_message(results: Sequence[GateResult], *, limit: int = 6000, log_hint: str = "gates/") -> str:
    """One user message naming every failing gate, within ``limit`` chars in all."""
    failing = [r for r in results if not r.passed]
    if not failing:
        return f"All {len(results)} gates passed."
    head = f"{len(failing)} of {len(results)} gates failed: {', '.join(r.name for r in failing)}.\n"
    budget = max(limit - len(head), 0) // len(failing)
    return (head + "".join(_gate_section(r, budget, log_hint) for r in failing))[:limit]
