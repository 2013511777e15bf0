"""The sections of summary.md a reviewer reads the run from: the rounds red to green, the change, what the model
said, the sub-agents, the links (``report.summary_markdown`` puts them in DESIGN §13's order).

Text from the repository or the model never reaches the page as markup: it goes through ``artifacts.markup``
(inline a code span, in a table a code span whose pipes are escaped, on several lines a fenced block, as prose
escaped text with links and mentions in code), after its terminal sequences are dropped and its hidden
characters shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prime_ci.artifacts import markup
from prime_ci.durations import format_duration
from prime_ci.isolation.untrusted import clean_terminal_text, visible
from prime_ci.money import usd

PATCH_CHARS = 30_000  # a pull request body holds 65,536 characters: the patch keeps room for the rest
MESSAGE_CHARS = 4_000
TASK_CHARS = 2_000
TESTS_PER_ROUND = 10
DIFFSTAT_FILES = 50
_SERVER = re.compile(r"https?://[A-Za-z0-9.-]+(:\d+)?")
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


@dataclass
class SummaryInputs:
    """What summary.md shows beyond result.json: each round's failing tests (one list per ``rounds`` entry,
    from ``Judge.round_failing``), the patch, the model's last words, the run's page on GitHub."""

    failing: list[list[dict[str, Any]]] = field(default_factory=list)
    patch: str = ""
    final_message: str | None = None
    links: list[tuple[str, str]] = field(default_factory=list)


def _one_line(text: str, limit: int) -> str:
    """``text`` on one line, hidden characters shown; longer than ``limit``, cut at a word's end and marked ``…``."""
    text = " ".join(visible(clean_terminal_text(str(text))).split())
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit + 1)
    return text[: space if space > limit * 2 // 3 else limit].rstrip() + "…"


def code_span(text: str, limit: int = 120) -> str:
    """Untrusted text as one inline code span: one line, clipped, its backticks unable to end it; escape sequences
    dropped, hidden characters shown (``<U+202E>``)."""
    return markup.code_span(_one_line(text, limit))


def plain(text: str, limit: int = 600) -> str:
    """Untrusted text as one line of ordinary text: markdown and HTML characters escaped, URLs, ``@name`` and
    ``#123`` in code spans (nothing links, nobody is notified), hidden characters shown."""
    return markup.text(_one_line(text, limit))


def code_cell(text: str, limit: int = 120) -> str:
    """:func:`code_span` for a table cell: a pipe cannot end the cell (GFM reads ``\\|`` as ``|`` in a span)."""
    return code_span(text, limit).replace("|", "\\|")


def fenced(text: str, info: str = "text") -> list[str]:
    """Text of any shape as a fenced code block it cannot close (clip it first: :func:`clipped`)."""
    return markup.fenced(clean_terminal_text(text.replace("\r\n", "\n")), info)


def clipped(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut at a line end at most ``limit`` characters in; whether it was cut."""
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", 0, limit)
    return text[: cut if cut > limit // 2 else limit], True


def rounds_section(result: dict[str, Any], failing: list[list[dict[str, Any]]]) -> list[str]:
    """Every gate run, red to green, with the failing tests by name and their first assertion line."""
    rounds = result.get("rounds") or []
    if not rounds:
        return []
    lines = ["### Gate rounds", "", "| round | kind | result | failing test | first assertion line | took | ended at |",
             "|---|---|---|---|---|---|---|"]
    for index, entry in enumerate(rounds):
        items = failing[index] if index < len(failing) else []
        tests = entry.get("tests")
        kind = entry.get("kind", "full") + (f" ({tests} test{'s' if tests != 1 else ''})" if tests else "")
        kind += " (`gates.run`)" if entry.get("on_demand") else ""
        state = "✅ green" if entry.get("passed") else "❌ red"
        cells = [_failure_cells(item, len(entry.get("gates") or []) > 1) for item in items[:TESTS_PER_ROUND]]
        if len(items) > TESTS_PER_ROUND:
            cells.append(f"… and {len(items) - TESTS_PER_ROUND} more | ")
        at = format_duration(entry["at_s"]) if entry.get("at_s") is not None else ""
        first = cells[0] if cells else " | "
        took = format_duration(entry.get("duration_s", 0))
        lines.append(f"| {entry.get('round', '')} | {kind} | {state} | {first} | {took} | {at} |")
        lines += [f"| | | | {cell} | | |" for cell in cells[1:]]
    ttg = result.get("time_to_green_s")
    green = next((r.get("round") for r in rounds if r.get("kind") == "full" and r.get("passed")), None)
    lines += ["", f"**Time to green:** {format_duration(ttg)} into the run (round {green})" if ttg is not None
              else "**Time to green:** never (no full gate round passed)", ""]
    return lines


def _failure_cells(item: dict[str, Any], name_gate: bool) -> str:
    """The failing test (or the gate that named none) and its first assertion line: two cells."""
    if item.get("test") is None:
        return f"{code_cell(item['gate'])} | {code_cell(item.get('message', ''))}"
    gate = f"{code_cell(item['gate'])} " if name_gate else ""
    return f"{gate}{code_cell(item['test'], 200)} | {code_cell(item.get('message', ''))}"


def diffstat(patch: str) -> list[tuple[str, int, int, bool]]:
    """(path, lines added, lines removed, binary) for each file of a ``git diff``, in its order."""
    files: list[tuple[str, int, int, bool]] = []
    name, added, removed, binary, header = "", 0, 0, False, False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            if name:
                files.append((name, added, removed, binary))
            parts = line[len("diff --git "):].split(" b/", 1)
            name, added, removed, binary, header = (parts[-1] if len(parts) == 2 else parts[0]), 0, 0, False, True
        elif header:
            if line.startswith("+++ ") and line != "+++ /dev/null":
                name = line[4:].removeprefix("b/")
            elif line.startswith("Binary files "):
                binary = True
            elif line.startswith("@@"):
                header = False
        elif line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    if name:
        files.append((name, added, removed, binary))
    return files


def change_section(patch: str, changed: list[str]) -> list[str]:
    """The diffstat, then the patch in a collapsed block, capped with the cap said."""
    stats = diffstat(patch)
    if not stats:
        shown = [f"- {code_span(f)}" for f in changed[:DIFFSTAT_FILES]]
        return ["### Changes", "", *(shown or ["(none)"]), ""]
    plus, minus = sum(s[1] for s in stats), sum(s[2] for s in stats)
    lines = [f"### Changes: {len(stats)} file(s), +{plus} −{minus}", "", "| file | + | − |", "|---|---|---|"]
    for path, added, removed, binary in stats[:DIFFSTAT_FILES]:
        lines.append(f"| {code_cell(path, 200)} | {'binary' if binary else added} | {'' if binary else removed} |")
    if len(stats) > DIFFSTAT_FILES:
        lines.append(f"| … and {len(stats) - DIFFSTAT_FILES} more files | | |")
    body, cut = clipped(patch, PATCH_CHARS)
    size = f"{patch.count(chr(10)):,} lines" + (f", cut at {PATCH_CHARS:,} characters" if cut else "")
    lines += ["", f"<details><summary>The patch ({size})</summary>", "", *fenced(body, "diff")]
    if cut:
        lines += ["", f"The patch is cut at {PATCH_CHARS:,} characters of {len(patch):,}; the whole patch is "
                  "`patch.diff` in the run's artifacts."]
    return [*lines, "", "</details>", ""]


def message_section(message: str | None) -> list[str]:
    """The model's last words: what it says it did, as untrusted text."""
    lines = ["### The model's final message", ""]
    if not message or not message.strip():
        return [*lines, "(none)", ""]
    body, cut = clipped(message.strip(), MESSAGE_CHARS)
    lines += ["Untrusted text, shown as the model wrote it" + (f" (cut at {MESSAGE_CHARS:,} characters):" if cut
                                                                else ":"), "", *fenced(body)]
    return [*lines, ""]


def task_section(task: str) -> list[str]:
    body, cut = clipped(str(task).strip(), TASK_CHARS)
    return ["### Task", "", *fenced(body),
            *([f"(cut at {TASK_CHARS:,} characters)"] if cut else []), ""]


def children_section(children: list[dict[str, Any]]) -> list[str]:
    if not children:
        return []
    lines = ["### Sub-agents", "", "| name | depth | turns | tokens | cost | outcome |", "|---|---|---|---|---|---|"]
    for c in children:
        cost = c.get("cost_usd")
        lines.append(f"| {code_cell(c.get('name', ''))} | {c.get('depth', '')} | {c.get('model_calls', '')} | "
                     f"{c.get('total_tokens', 0):,} | {'unknown' if cost is None else usd(cost)} | "
                     f"{code_cell(c.get('status', ''))} |")
    return [*lines, ""]


def github_links(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The run's page and its artifacts on GitHub, when the job's variables name them (and look like it)."""
    server, repository = env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", "")
    run_id, attempt = env.get("GITHUB_RUN_ID", ""), env.get("GITHUB_RUN_ATTEMPT", "")
    if not (_SERVER.fullmatch(server) and _REPOSITORY.fullmatch(repository) and run_id.isdigit()):
        return []
    run = f"{server}/{repository}/actions/runs/{run_id}"
    page = f"{run}/attempts/{attempt}" if attempt.isdigit() and attempt != "1" else run
    return [("the workflow run", page), ("its artifacts", f"{run}#artifacts")]


def links_section(links: list[tuple[str, str]]) -> list[str]:
    if not links:
        return []
    return ["### Links", "", *[f"- {markup.link(label, url)}" for label, url in links], ""]
