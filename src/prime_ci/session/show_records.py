"""``prime-ci show``'s line for a ``custom`` record: prime-ci's own records in words (a round's verdict and failing
tests, spend, the stop), any other record's fields as ``key: value``. Long text ends at a word's end with ``…``;
nested values are summarised; the console wraps the line, so nothing is cut inside a word.

Records may come from another version or another writer: a field that is missing or of another shape is left out,
never an error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prime_ci.durations import format_duration
from prime_ci.money import usd

TEXT_SHOWN = 160  # characters of one string field
ITEMS_SHOWN = 6  # entries of a list, fields of a record
DEPTH_SHOWN = 3  # nested records and lists deeper than this are counted, not shown


def describe(custom_type: str, data: Any) -> str:
    """One line for the record ``custom_type`` holding ``data`` (already cleaned for the terminal): in words when it
    has the fields prime-ci writes, else its fields as they are."""
    known = _KNOWN.get(custom_type)
    if known is not None and isinstance(data, dict) and known[0] <= data.keys():
        return known[1](data)
    return f"{custom_type}: {fields(data)}"


def fields(value: Any, depth: int = 0) -> str:
    """Any JSON value in a line: strings clipped at a word, lists and records of records summarised."""
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, dict):
        if depth >= DEPTH_SHOWN:
            return f"({len(value)} fields)"
        items = [f"{k}: {fields(v, depth + 1)}" for k, v in list(value.items())[:ITEMS_SHOWN * 2]]
        more = len(value) - len(items)
        text = ", ".join(items) + (f" and {more} more" if more > 0 else "")
        return text if depth == 0 else f"({text})"
    if isinstance(value, list):
        if depth >= DEPTH_SHOWN and any(isinstance(v, dict | list) for v in value):
            return f"{len(value)} entries"
        return _listed([fields(v, depth + 1) for v in value]) or "[]"
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def clip(text: str, limit: int = TEXT_SHOWN) -> str:
    """``text`` on one line; longer than ``limit``, cut at a word's end and marked ``…``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    space = flat.rfind(" ", 0, limit + 1)
    return flat[: space if space > limit // 2 else limit].rstrip() + "…"


def _listed(items: list[str]) -> str:
    more = len(items) - ITEMS_SHOWN
    return ", ".join(items[:ITEMS_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any, word: str) -> str | None:
    n = _num(value)
    return None if n is None else f"{int(n):,} {word}"


def _join(parts: list[str | None], sep: str = " · ") -> str:
    return sep.join(p for p in parts if p)


def _run(d: dict[str, Any]) -> str:
    b = d["budgets"] if isinstance(d.get("budgets"), dict) else {}
    wall, cost = _num(b.get("max_wall_s")), _num(b.get("max_cost_usd"))
    budgets = _join([_count(b.get("max_turns"), "turns"), _count(b.get("max_tokens"), "tokens"),
                     None if wall is None else f"{format_duration(wall)} wall",
                     None if cost is None else f"{usd(cost)} cost"], ", ")
    gates = [g for g in d.get("gates") or [] if isinstance(g, dict)]
    names = _listed([f"{g.get('name')} ({clip(str(g.get('command', '')), 80)})" for g in gates])
    base = d.get("base_commit")
    return _join([f"run {d.get('run_id')}", f"base {str(base)[:12]}" if base else None,
                  f"budgets: {budgets}" if budgets else None, f"gates: {names}" if gates else None])


def _usage(d: dict[str, Any]) -> str:
    detail = _join([_count(d.get("prompt_tokens"), "prompt"), _count(d.get("completion_tokens"), "completion"),
                    _count(d.get("cache_read_tokens") or None, "from the cache")], ", ")
    tokens = _count(d.get("total_tokens"), "tokens")
    cost = _num(d.get("cost_usd"))
    why = "compaction" if d.get("compaction") else "refinement" if d.get("refine") else None
    return "usage so far: " + _join([_count(d.get("turns"), "turn(s)"), _count(d.get("model_calls"), "model call(s)"),
                              f"{tokens} ({detail})" if tokens and detail else tokens,
                              "cost unknown" if cost is None else usd(cost), why])


def _gate(d: dict[str, Any]) -> str:
    head = f"gates round {d.get('round')}"
    if d.get("skipped"):
        return f"{head}: skipped ({clip(str(d['skipped']))})"
    took = _num(d.get("duration_s"))
    state = _join([f"{head} ({d.get('kind', 'full')}): {'green' if d.get('passed') else 'red'}"
                   + ("" if took is None else f" in {format_duration(took)}"),
                   _listed([str(g) for g in d.get("gates") or []])])
    failing = [f for f in d.get("failing") or [] if isinstance(f, dict)]
    named = [clip(_join([str(f.get("test") or f.get("gate")), str(f.get("message") or "")], ": "), 200)
             for f in failing]
    return _join([state, f"failing: {'; '.join(named[:ITEMS_SHOWN])}" if named else None,
                  f"and {len(named) - ITEMS_SHOWN} more" if len(named) > ITEMS_SHOWN else None])


def _commands(kind: str) -> Callable[[dict[str, Any]], str]:
    def words(d: dict[str, Any]) -> str:
        done = []
        for r in [r for r in d.get("results") or [] if isinstance(r, dict)]:
            took = _num(r.get("duration_s"))
            state = ("ok" if r.get("passed") else "timed out" if r.get("timed_out")
                     else f"FAILED (exit {r.get('exit_code')})")
            done.append(f"{r.get('name')} {state}" + ("" if took is None else f" in {format_duration(took)}"))
        where = f" round {d['round']}" if d.get("round") is not None else ""
        return f"{kind}{where}: {_listed(done) or 'nothing ran'}"
    return words


def _stop(d: dict[str, Any]) -> str:
    detail = d.get("detail")
    return f"stop: {d.get('stop_reason')} (exit {d.get('exit_code')})" + (f": {clip(str(detail))}" if detail else "")


# each record prime-ci writes: the fields it always has, and its words
_KNOWN: dict[str, tuple[set[str], Callable[[dict[str, Any]], str]]] = {
    "prime_ci.run": ({"run_id"}, _run), "prime_ci.usage": ({"total_tokens"}, _usage),
    "prime_ci.gate": ({"round"}, _gate), "prime_ci.stop": ({"stop_reason"}, _stop),
    "prime_ci.setup": ({"results"}, _commands("setup")), "prime_ci.build": ({"results"}, _commands("build")),
}
