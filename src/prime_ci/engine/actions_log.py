"""The run in a GitHub Actions log (``GITHUB_ACTIONS=true``): each setup command and each gate run in its own
``::group::``, the final round's failing tests as ``::error`` annotations on their lines, the verdict as one
``::notice``.

A group is written whole, in one write, when its command or round has ended, so its lines cannot interleave with
the console's (stderr) lines. Its lines sit between ``::stop-commands::TOKEN`` and ``::TOKEN::`` (a fresh random
token for each group): the runner reads no command there, whatever a test name or a line of output holds. Each line
also starts with ``│`` and has ``##[`` broken, so it reads as data in any log. Everything else is built by
``workflow_commands.command``, which neutralises what it quotes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prime_ci.durations import format_duration
from prime_ci.engine.setup import SetupOutcome, last_lines
from prime_ci.gates.junit import GateResult, ended, github_annotations
from prime_ci.isolation.untrusted import clean_terminal_text
from prime_ci.isolation.workflow_commands import command, stop_commands
from prime_ci.money import usd

Emit = Callable[[str], None]
TAIL_LINES = 30  # of a setup command's output, in its group


def _line(text: str) -> str:
    """One line of data inside a group: it does not start with ``::`` nor hold ``##[``."""
    return "│ " + clean_terminal_text(text).replace("\n", " ").replace("##[", "## [")


@dataclass
class ActionsLog:
    emit: Emit
    root: Path  # the repository's root in the run (the worktree): annotations are relative to it
    setups: int = 0

    def group(self, title: str, lines: Sequence[str]) -> None:
        stop, resume = stop_commands()
        block = [command("group", clean_terminal_text(title)), stop, *map(_line, lines), resume, command("endgroup")]
        try:
            self.emit("\n".join(block))
        except BaseException:  # cut short (Ctrl-C inside the write): the runner must not stay deaf to commands
            self.emit("\n" + resume)
            raise

    def setup(self, total: int, outcome: SetupOutcome, output: str) -> None:
        """One setup command, its result in the title and the end of its output inside."""
        self.setups += 1
        state = "ok" if outcome.passed else "FAILED (" + ended(outcome.exit_code, outcome.timed_out,
                                                             outcome.timeout_s) + ")"
        tail = last_lines(output, TAIL_LINES)
        self.group(f"setup {self.setups}/{total} {outcome.name}: {state} in {format_duration(outcome.duration_s)}", [
            f"$ {outcome.command.strip()}", *([f"last {len(tail)} line(s) of its output:"] if tail else []),
            *tail, f"log: {outcome.log}"])

    def round(self, entry: dict[str, Any], failing: list[dict[str, Any]]) -> None:
        """One gate run of a round (``Judge.on_round``): red or green in the title, what failed inside."""
        kind = entry.get("kind", "full") + (f", {entry['tests']} test(s)" if entry.get("kind") == "fast" else "")
        state = "green" if entry.get("passed") else "red"
        tests = [f for f in failing if f.get("test")]
        what = f": {len(tests)} failing test(s)" if tests else ""
        took = format_duration(entry.get("duration_s", 0))
        title = f"gate round {entry.get('round')} ({kind}): {state}{what} in {took}"
        lines = [f"gates: {', '.join(entry.get('gates') or [])}"]
        for f in failing:
            if f.get("test"):
                where = f" ({f['file']}{':' + str(f['line']) if f.get('line') else ''})" if f.get("file") else ""
                lines.append(f"FAILED {f['gate']}: {f['test']}{where}: {f.get('message', '')}")
            else:
                lines += [f"{f['gate']}: {f.get('message', '')}", *[f"  {d}" for d in f.get("detail") or []]]
        self.group(title, lines)

    def end(self, result: dict[str, Any], last: Sequence[GateResult]) -> None:
        """The final round's failing tests on their lines, then the verdict."""
        for line in github_annotations(last, root=self.root) if not result["success"] else []:
            self.emit(line)
        self.emit(command("notice", verdict(result), title=f"prime-ci: {result['stop_reason']}"))


def verdict(result: dict[str, Any]) -> str:
    """The run in one line: outcome, the rounds red to green, spend."""
    u = result.get("usage") or {}
    rounds = [r for r in result.get("rounds") or [] if r.get("kind") != "fast"]
    red = sum(not r.get("passed") for r in rounds)
    parts = [f"{result['stop_reason']} (exit {result['exit_code']})" + (f": {result['detail']}"
                                                                       if result.get("detail") else "")]
    if rounds:
        green = result.get("time_to_green_s")
        parts.append(f"{len(rounds)} gate round(s), {red} red" + (f", green after {format_duration(green)}"
                                                                 if green is not None else ", never green"))
    cost = u.get("cost_usd")
    parts.append(f"{u.get('turns', 0)} turn(s), {u.get('total_tokens', 0):,} tokens"
                 + ("" if cost is None else f", {usd(cost)}") + f", {format_duration(result.get('wall_s', 0))}")
    return " · ".join(parts)
