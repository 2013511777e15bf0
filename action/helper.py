"""Helpers for action/run.sh (stdlib only; runs under the interpreter prime-ci was installed with).

    helper.py event-text EVENT_JSON OUT [EXTRA_FILE]   collect PR/issue/comment text into OUT (data, never code)
    helper.py split-args TEXT [INPUT]                  shell-like split, NUL-separated, nothing evaluated
    helper.py budgets TEXT OUT                         "max-turns=30 max-wall=20m" -> OUT, a --config TOML file
    helper.py outputs CODE OUT_DIR [ARTIFACT]          step outputs (key=value lines) from OUT_DIR/result.json
    helper.py bench-outputs CODE OUT_DIR [ARTIFACT]    the same from a bench's OUT_DIR/bench.json
    helper.py setup-failure OUT_DIR                    markdown: the tail of the failed setup command's log
    helper.py reason CODE OUT_DIR STDERR_FILE [COMMAND] the one-line reason of a run that did not complete
    helper.py failure-summary CODE REASON [COMMAND]    markdown: a run that left no summary, and why

Its markdown follows prime-ci's one escaping rule, src/prime_ci/artifacts/markup.py, loaded by its path from the
action's checkout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

MARKUP = Path(__file__).resolve().parents[1] / "src" / "prime_ci" / "artifacts" / "markup.py"
MAX_UNTRUSTED_BYTES = 512 * 1024
REASON_CHARS = 500
ERROR_LINE = "prime-ci: error: "  # how prime-ci prints the error that ends it (cli/commands.py: main)
SETUP_TAIL_LINES = 40
SETUP_TAIL_BYTES = 16 * 1024
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
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


def _load_markup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prime_ci_markup", MARKUP)
    if spec is None or spec.loader is None:
        raise SystemExit(f"prime-ci: cannot load {MARKUP}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


markup = _load_markup()


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


def split_args(text: str, name: str = "extra-args") -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise UsageError(f"input {name}: {exc}") from None


def budgets(text: str) -> str:
    """The budgets input as the operator's settings file that `prime-ci run --config` reads, which checks the
    values as it checks the flags'. The keys are the run's budget options (its help panel "Budgets")."""
    settings: dict[str, str] = {}
    for word in text.replace(",", " ").split():
        key, sep, value = word.partition("=")
        key = key.strip().removeprefix("--")
        if not sep or not value:
            raise UsageError(f"input budgets: expected key=value, got {word!r}")
        if key not in BUDGET_KEYS:
            raise UsageError(f"input budgets: unknown key {key!r} (known: {', '.join(BUDGET_KEYS)})")
        if key in settings:
            raise UsageError(f"input budgets: {key} is given twice")
        settings[key] = value
    return "".join(f"{key} = {json.dumps(value, ensure_ascii=False)}\n" for key, value in settings.items())


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


def bench_outputs(code: str, out_dir: str, artifact: str = "") -> list[str]:
    """Step outputs of ``prime-ci bench``: the run outputs' names (result is bench.json, tokens and cost over
    every run, success is exit 0) plus solve-rate and report. Only exit 0 and 1 leave a report of this bench."""
    lines = [f"exit-code={int(code)}", f"out-dir={out_dir}", "stop-reason=", "run-id=", "changed-files=[]"]
    bench_path = Path(out_dir) / "bench.json"
    try:
        if int(code) not in (0, 1):
            raise FileNotFoundError(bench_path)
        report = json.loads(bench_path.read_text(encoding="utf-8"))
        harnesses = report["harnesses"]
        costs = [h.get("cost_usd") for h in harnesses]
        tokens = sum(int(h.get("total_tokens") or 0) for h in harnesses)
        solve_rate = float(report["solve_rate"])
    except (OSError, ValueError, KeyError, TypeError):
        return [*lines, "result=", "success=false", "total-tokens=", "cost-usd=", "solve-rate=", "report=",
                f"artifact-name={artifact}"]  # fmt: skip
    cost = "" if any(c is None for c in costs) else round(sum(costs), 6)
    if not artifact:  # unique per workflow run attempt and shard; give artifact-name for anything else
        run, attempt = os.environ.get("GITHUB_RUN_ID") or "local", os.environ.get("GITHUB_RUN_ATTEMPT") or "1"
        artifact = f"prime-ci-bench-{run}-{attempt}"
        shard = report.get("shard")
        if isinstance(shard, str) and re.fullmatch(r"\d+/\d+", shard):
            artifact += "-shard-" + shard.replace("/", "-of-")
        elif report.get("merged_from"):
            artifact += "-merged"
    return [
        *lines,
        f"result={bench_path}",
        f"success={'true' if int(code) == 0 else 'false'}",
        f"total-tokens={tokens}",
        f"cost-usd={cost}",
        f"solve-rate={solve_rate}",
        f"report={Path(out_dir) / 'bench.md'}",
        f"artifact-name={artifact}",
    ]


def _tail(path: Path) -> str:
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - SETUP_TAIL_BYTES))
        raw = handle.read()
    text = CONTROL.sub("", ANSI.sub("", raw.decode("utf-8", errors="replace").replace("\r\n", "\n")))
    lines = text.rstrip("\n").split("\n")
    if size > SETUP_TAIL_BYTES:
        lines = lines[1:]  # the first line read is most likely cut
    return "\n".join(lines[-SETUP_TAIL_LINES:])


def setup_failure(out_dir: str) -> str:
    """The failed setup command (result.json ``setup``) and the end of its log, for the step summary: exit 9
    stops the run before any model call, and the log says why (a missing dependency, no network...)."""
    root = Path(out_dir).resolve()
    try:
        result = json.loads((root / "result.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return ""
    setup = result.get("setup") if isinstance(result, dict) else None
    failed = [s for s in setup if isinstance(s, dict) and not s.get("passed")] if isinstance(setup, list) else []
    if not failed:
        return ""
    entry = failed[-1]
    name = re.sub(r"[^A-Za-z0-9._-]", "", str(entry.get("name", "")))[:100] or "setup"
    log = str(entry.get("log") or "")
    path = (root / log).resolve()
    try:
        if not log or not path.is_relative_to(root):
            raise FileNotFoundError(log)
        text = _tail(path)
    except OSError:
        return f"### Setup {markup.code_span(name)} failed\n\nIts log is missing from the artifacts.\n"
    shown = re.sub(r"[^A-Za-z0-9._/-]", "", log)
    block = "\n".join(markup.fenced(text))
    return (
        f"### Setup {markup.code_span(name)} failed: the end of {markup.code_span(shown)}\n\n"
        f"The whole log is in the uploaded artifacts.\n\n{block}\n"
    )


def _line(text: str) -> str:
    text = " ".join(CONTROL.sub("", ANSI.sub("", text)).split())
    return text[:REASON_CHARS] + ("…" if len(text) > REASON_CHARS else "")


def reason(code: str, out_dir: str, stderr_file: str, command: str = "run") -> str:
    """Why the run (or bench) ended as it did, in one line, for the error output, the step summary, the ::error of
    finish.sh and the pull request comment: this run's result.json ``detail`` (exit 2 leaves no result.json of its
    own), else the last error line prime-ci printed, else for a crash the last line it printed at all."""
    if int(code) == 0:
        return ""
    if command == "run" and int(code) != 2:
        try:
            result = json.loads((Path(out_dir) / "result.json").read_text(encoding="utf-8"))
            detail = str(result.get("detail") or "") if isinstance(result, dict) else ""
        except (OSError, json.JSONDecodeError):
            detail = ""
        if detail.strip():
            return _line(detail.strip().splitlines()[0])
        if (Path(out_dir) / "result.json").is_file():
            return ""  # a run that ended on its own terms (a budget, red gates): result.json says it all
    if command == "bench" and int(code) == 1 and (Path(out_dir) / "bench.json").is_file():
        return ""  # a threshold failed: the report says which
    try:
        with open(stderr_file, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 64 * 1024))
            lines = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line[len(ERROR_LINE):] for line in lines if line.startswith(ERROR_LINE)]
    shown = [line for line in lines if line.strip()]
    return _line(errors[-1] if errors else shown[-1] if shown else "")


def code_span(text: str) -> str:
    """One line of untrusted text as an inline code span: no markup, link or ``@mention`` of it is read."""
    text = _line(text)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def failure_summary(code: str, why: str, command: str = "run") -> str:
    """The step summary of a run that wrote none: what happened and the reason."""
    if int(code) == 2:
        head = f"## ❌ prime-ci{' bench' if command == 'bench' else ''}: configuration error (exit 2)"
        tail = "Nothing started: no model call was made."
    else:
        what = "a report" if command == "bench" else "a summary"
        head = f"## ❌ prime-ci{' bench' if command == 'bench' else ''} exited {int(code)} before writing {what}"
        tail = "See the step log."
    return f"{head}\n\n" + (f"> {code_span(why)}\n\n" if why else "") + f"{tail}\n"


def main(argv: list[str]) -> int:
    try:
        match argv:
            case ["event-text", event_path, out]:
                event_text(event_path, out)
            case ["event-text", event_path, out, extra]:
                event_text(event_path, out, extra)
            case ["split-args", text, *name] if len(name) <= 1:
                sys.stdout.write("".join(a + "\0" for a in split_args(text, *name)))
            case ["budgets", text, out]:
                Path(out).write_text(budgets(text), encoding="utf-8")
            case ["outputs", code, out_dir, *artifact] if len(artifact) <= 1:
                sys.stdout.write("".join(line + "\n" for line in outputs(code, out_dir, *artifact)))
            case ["bench-outputs", code, out_dir, *artifact] if len(artifact) <= 1:
                sys.stdout.write("".join(line + "\n" for line in bench_outputs(code, out_dir, *artifact)))
            case ["setup-failure", out_dir]:
                sys.stdout.write(setup_failure(out_dir))
            case ["reason", code, out_dir, stderr_file, *command] if len(command) <= 1:
                print(reason(code, out_dir, stderr_file, *command))
            case ["failure-summary", code, why, *command] if len(command) <= 1:
                sys.stdout.write(failure_summary(code, why, *command))
            case _:
                raise UsageError(f"usage: {__doc__}")
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
