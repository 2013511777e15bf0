"""Helpers for action/run.sh (stdlib only; runs under the interpreter prime-ci was installed with).

    helper.py event-text EVENT_JSON OUT [EXTRA_FILE]   collect PR/issue/comment text into OUT (data, never code)
    helper.py split-args TEXT                          shell-like split, NUL-separated, nothing evaluated
    helper.py budgets TEXT                             "max-turns=30 max-wall=20m" -> NUL-separated flags
    helper.py outputs CODE OUT_DIR [ARTIFACT]          step outputs (key=value lines) from OUT_DIR/result.json
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

MAX_UNTRUSTED_BYTES = 512 * 1024
BUDGET_KEYS = ("max-turns", "max-tokens", "max-wall", "max-cost", "cell-timeout", "max-gate-retries", "max-depth",
               "max-children")  # fmt: skip
# (event payload path, heading) in the order they are written; absent fields are skipped.
EVENT_FIELDS = (
    (("pull_request", "title"), "Pull request title"),
    (("pull_request", "body"), "Pull request body"),
    (("issue", "title"), "Issue title"),
    (("issue", "body"), "Issue body"),
    (("review", "body"), "Review"),
    (("comment", "body"), "Comment"),
    (("discussion", "title"), "Discussion title"),
    (("discussion", "body"), "Discussion body"),
)


class UsageError(Exception):
    pass


def _dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def event_text(event_path: str, out: str, extra: str | None = None) -> None:
    parts: list[str] = []
    if event_path and Path(event_path).is_file():
        try:
            event = json.loads(Path(event_path).read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            raise UsageError(f"GITHUB_EVENT_PATH is not JSON: {exc}") from None
        for path, heading in EVENT_FIELDS:
            value = _dig(event, path)
            if isinstance(value, str) and value.strip():
                author = _dig(event, (*path[:-1], "user", "login"))
                by = f" (by {author})" if isinstance(author, str) else ""
                parts.append(f"## {heading}{by}\n\n{value.strip()}\n")
    if extra:
        try:
            text = Path(extra).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"input untrusted-file: cannot read {extra}: {exc.strerror}") from None
        if text.strip():
            parts.append(f"## Supplied text\n\n{text.strip()}\n")
    if not parts:
        return
    raw = "\n".join(parts).encode("utf-8")
    if len(raw) > MAX_UNTRUSTED_BYTES:
        raw = raw[:MAX_UNTRUSTED_BYTES] + b"\n[truncated]\n"
    Path(out).write_bytes(raw.decode("utf-8", errors="ignore").encode("utf-8"))


def split_args(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise UsageError(f"input extra-args: {exc}") from None


def budgets(text: str) -> list[str]:
    flags: list[str] = []
    for word in text.replace(",", " ").split():
        key, sep, value = word.partition("=")
        key = key.strip().removeprefix("--")
        if not sep or not value:
            raise UsageError(f"input budgets: expected key=value, got {word!r}")
        if key not in BUDGET_KEYS:
            raise UsageError(f"input budgets: unknown key {key!r} (known: {', '.join(BUDGET_KEYS)})")
        flags += [f"--{key}", value]
    return flags


def outputs(code: str, out_dir: str, artifact: str = "") -> list[str]:
    lines = [f"exit-code={int(code)}", f"out-dir={out_dir}"]
    result_path = Path(out_dir) / "result.json"
    try:
        if int(code) == 2:  # a usage error: nothing started, any result.json there is an older run's
            raise FileNotFoundError(result_path)
        result = json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return [*lines, "stop-reason=", "result=", "run-id=", "success=false", "total-tokens=", "cost-usd=",
                "changed-files=[]", f"artifact-name={artifact}"]  # fmt: skip
    usage = result.get("usage") or {}
    cost = usage.get("cost_usd")
    changed = result.get("changed_files") or []
    return [
        *lines,
        f"stop-reason={result.get('stop_reason', '')}",
        f"result={result_path}",
        f"run-id={result.get('run_id', '')}",
        f"success={'true' if result.get('success') else 'false'}",
        f"total-tokens={usage.get('total_tokens', '')}",
        f"cost-usd={'' if cost is None else cost}",
        "changed-files=" + json.dumps(changed, separators=(",", ":")),
        f"artifact-name={artifact or 'prime-ci-' + str(result.get('run_id', ''))}",
    ]


def main(argv: list[str]) -> int:
    try:
        match argv:
            case ["event-text", event_path, out]:
                event_text(event_path, out)
            case ["event-text", event_path, out, extra]:
                event_text(event_path, out, extra)
            case ["split-args", text]:
                sys.stdout.write("".join(a + "\0" for a in split_args(text)))
            case ["budgets", text]:
                sys.stdout.write("".join(a + "\0" for a in budgets(text)))
            case ["outputs", code, out_dir, *artifact] if len(artifact) <= 1:
                sys.stdout.write("".join(line + "\n" for line in outputs(code, out_dir, *artifact)))
            case _:
                raise UsageError(f"usage: {__doc__}")
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
