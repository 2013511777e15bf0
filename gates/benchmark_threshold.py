#!/usr/bin/env python3
"""Fail a gate when a benchmark metric in a JSON file breaks a limit (stdlib only).

    benchmark_threshold.py FILE KEY [--max X] [--min X] [--baseline FILE --max-regression PCT]
                           [--higher-is-better]

KEY is dotted; numeric parts index lists (``benchmarks.0.stats.mean``). Exit 0 when every given limit
holds, 1 when one is broken (with a message saying which), 2 for usage or input errors.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any


class InputError(Exception):
    pass


def lookup(data: Any, key: str, source: str) -> float:
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            raise InputError(f"{source}: key {key!r} not found (no {part!r})")
    if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
        raise InputError(f"{source}: {key} is {node!r}, not a finite number")
    return float(node)


def load(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON: {exc}") from None


def check(args: argparse.Namespace) -> list[str]:
    value = lookup(load(args.file), args.key, args.file)
    broken = []
    if args.max is not None and value > args.max:
        broken.append(f"{args.key} = {value:g} is above the maximum {args.max:g}")
    if args.min is not None and value < args.min:
        broken.append(f"{args.key} = {value:g} is below the minimum {args.min:g}")
    if args.baseline is not None:
        base = lookup(load(args.baseline), args.key, args.baseline)
        if base == 0:
            raise InputError(f"{args.baseline}: baseline {args.key} is 0; a relative regression is undefined")
        change = (base - value if args.higher_is_better else value - base) / abs(base) * 100
        if change > args.max_regression:
            broken.append(
                f"{args.key} = {value:g} is {change:.1f}% worse than the baseline {base:g} "
                f"(allowed: {args.max_regression:g}%)"
            )
    print(f"{args.key} = {value:g}")
    return broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", help="JSON file with the benchmark results")
    parser.add_argument("key", help="dotted path to the metric, e.g. benchmarks.0.stats.mean")
    parser.add_argument("--max", type=float, help="fail when the metric is above this")
    parser.add_argument("--min", type=float, help="fail when the metric is below this")
    parser.add_argument("--baseline", help="JSON file with the baseline value under the same key")
    parser.add_argument("--max-regression", type=float, metavar="PCT", help="allowed worsening in percent")
    parser.add_argument("--higher-is-better", action="store_true", help="for throughput-like metrics")
    args = parser.parse_args(argv)
    if (args.baseline is None) != (args.max_regression is None):
        parser.error("--baseline and --max-regression go together")
    if args.max is None and args.min is None and args.baseline is None:
        parser.error("give at least one limit: --max, --min or --baseline with --max-regression")
    try:
        broken = check(args)
    except InputError as exc:
        print(f"benchmark_threshold: {exc}", file=sys.stderr)
        return 2
    for line in broken:
        print(f"FAIL: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
