"""Deterministic checks and texts for publish/publish.sh (stdlib only; no prime-ci install needed).

    helper.py field JSON_FILE KEY                 a dotted field of a JSON file ('' when missing or null)
    helper.py json-field KEY                      the same, for a JSON document on stdin
    helper.py check-paths [options]               policy check of `git diff --cached --raw -z` on stdin
    helper.py stage-harness SRC DEST               copy harness state as the run commits it (no hidden files)
    helper.py secrets PATCH                       refuse a patch whose added lines look like credentials
    helper.py title RESULT_JSON [TITLE]           a one-line, sanitized PR title
    helper.py body RESULT_JSON                    the change PR's body (summary.md beside it), sanitized
    helper.py sanitize FILE                       sanitize markdown from the run (harness-pr.md)
    helper.py comment [options]                   the pull request comment of this workflow, for any outcome
    helper.py find-comment MARKER AUTHOR          the id of that comment in a comments listing on stdin ('' if none)
    helper.py marker WORKFLOW                     the hidden first line of that comment
    helper.py md-text TEXT                        TEXT as one line of inert markdown (the step summary)

A refusal prints one line on stderr and exits 1; usage errors exit 2.

Every piece of markdown it writes follows prime-ci's one escaping rule, src/prime_ci/artifacts/markup.py (a
file with no dependencies, loaded by its path from this checkout: the publish job does not install prime-ci).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# Never publishable, whatever allow-paths says: CI definitions, action metadata, code owners, submodules,
# prime-ci's own state directory.
HARD_FORBIDDEN = (".github/**", "action.yml", "action.yaml", "CODEOWNERS", ".gitmodules", ".prime-ci/**")
# Forbidden unless listed in allow-paths: lock files and files that configure tools on developers' machines.
SOFT_FORBIDDEN = (
    "*.lock", "package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "go.sum", "*.lock.json",
    ".pre-commit-config.yaml", "prime-ci.toml", ".envrc",
)  # fmt: skip
SECRET_PATTERNS = (
    ("GitHub token", r"\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
    ("AWS access key", r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    ("Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("provider API key", r"\bsk-(ant-)?[A-Za-z0-9_-]{32,}"),
    ("Google API key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
)
FOOTER = "Opened by the prime-ci publish step. Review the diff as you would any contribution; prime-ci never merges."
MARKUP = Path(__file__).resolve().parents[1] / "src" / "prime_ci" / "artifacts" / "markup.py"


def _load_markup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prime_ci_markup", MARKUP)
    if spec is None or spec.loader is None:
        raise SystemExit(f"prime-ci publish: cannot load {MARKUP}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


markup = _load_markup()


class Refused(Exception):
    pass


def glob_regex(pattern: str) -> re.Pattern[str]:
    """gitignore-like: `**` crosses directories, `*` and `?` do not; a pattern without `/` matches at any depth."""
    p = pattern.strip()
    if p.endswith("/"):
        p += "**"
    if "/" not in p:
        p = "**/" + p
    p = p.lstrip("/")
    out, i = "", 0
    while i < len(p):
        if p.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif p.startswith("**", i):
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return re.compile(out + r"\Z", re.IGNORECASE)  # case-insensitive: checkouts on macOS/Windows fold case


def matches(path: str, patterns: list[str]) -> str | None:
    for pattern in patterns:
        if pattern.strip() and glob_regex(pattern).match(path):
            return pattern
    return None


def words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s,]+", text) if w]


def parse_raw(data: bytes) -> list[tuple[str, str, str]]:
    """(new mode, status, path) from `git diff --raw -z --no-renames`."""
    fields = data.decode("utf-8", "surrogateescape").split("\0")
    out = []
    i = 0
    while i + 1 < len(fields) and fields[i].startswith(":"):
        meta = fields[i][1:].split()
        out.append((meta[1], meta[4], fields[i + 1]))
        i += 2
    return out


def check_paths(raw: bytes, extra_paths: list[str], forbidden: list[str], allowed: list[str], max_files: int,
                only: list[str] | None = None) -> None:  # fmt: skip
    entries = parse_raw(raw)
    paths = sorted({p for _, _, p in entries} | set(extra_paths))
    if not entries:
        raise Refused("the patch changes nothing")
    if len(paths) > max_files:
        raise Refused(f"{len(paths)} files changed, more than max-files {max_files}")
    for mode, status, path in entries:
        if mode == "120000":
            raise Refused(f"{path}: symbolic links are not published")
        if mode == "160000":
            raise Refused(f"{path}: submodule changes are not published")
        if status not in ("A", "M", "D"):
            raise Refused(f"{path}: unexpected change type {status}")
    for path in paths:
        if ".." in path.split("/") or path.startswith("/"):
            raise Refused(f"{path}: path leaves the repository")
        if only and not matches(path, only):
            raise Refused(f"{path}: outside {', '.join(only)}")
        rule = matches(path, [*HARD_FORBIDDEN, *forbidden])
        if rule is None and not matches(path, allowed):
            rule = matches(path, list(SOFT_FORBIDDEN))
        if rule is not None:
            raise Refused(f"{path}: forbidden path (rule {rule!r})")


def stage_harness(src: Path, dest: Path) -> None:
    """Regular, non-hidden files outside caches: what prime-ci itself commits as harness state."""
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if name.startswith(".") or path.is_symlink() or not path.is_file():
                continue
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())


def scan_secrets(patch: str) -> None:
    for line in patch.splitlines():
        if not line.startswith("+") or line.startswith("+++"):
            continue
        for name, pattern in SECRET_PATTERNS:
            if re.search(pattern, line):
                raise Refused(f"the patch adds what looks like a {name}; nothing is published")


def allowed_hosts() -> set[str]:
    hosts = {"github.com", "docs.github.com"}
    server = os.environ.get("GITHUB_SERVER_URL", "")
    match = re.match(r"https?://([^/:]+)", server)
    if match:
        hosts.add(match.group(1).lower())
    return hosts


def sanitize(text: str, *, collapsible: bool = False) -> str:
    """Markdown from the run made safe to post (RELIABILITY S9), by prime-ci's one rule (``markup.sanitize``):
    code spans and fenced blocks kept as they are; elsewhere no HTML, images or links to other hosts, no bare
    URLs to them, no @mentions, issue references or closing keywords, no hidden text; bounded size.
    ``collapsible``: the bare ``<details>``/``<summary>`` lines prime-ci folds a block in stay."""
    return str(markup.sanitize(text, allowed_hosts(), folds=collapsible))


def code(text: object) -> str:
    """An inline code span that the text cannot break out of."""
    return str(markup.code_span(text))


def cell(text: object) -> str:
    """:func:`code` in a table cell: a ``|`` cannot end the cell."""
    return str(markup.code_cell(text))


def field(data: Any, key: str) -> str:
    for part in key.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return ""
    if data is None:
        return ""
    if isinstance(data, bool):
        return "true" if data else "false"
    if isinstance(data, (dict, list)):
        return json.dumps(data)
    return str(data)


def load_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"prime-ci publish: cannot read {path}: {exc}") from None


def usd(value: float) -> str:
    """prime-ci's one money format (``prime_ci.money.usd``; a test keeps the two alike): ``$0.01`` and up to two
    places, below a cent four significant digits."""
    if value < 0:
        return "-" + usd(-value)
    if value == 0:
        return "$0.00"
    places = 3 - math.floor(math.log10(value))
    small = round(value, places)
    return f"${small:.{places}f}".rstrip("0") if small < 0.01 else f"${value:,.2f}"


def duration(seconds: float) -> str:
    """prime-ci's one duration format (``prime_ci.durations.format_duration``; a test keeps the two alike): ``1h30m``,
    ``2m5s``, ``45s``; under a minute to a tenth of a second (``1.5s``)."""
    tenths = round(seconds, 1)
    if tenths < 60 and tenths != int(tenths):
        return f"{tenths:.1f}s"
    h, rest = divmod(round(seconds), 3600)
    m, sec = divmod(rest, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{sec}s" if sec or not (h or m) else "")


def title(result: dict[str, Any], given: str) -> str:
    text = given.strip() or "prime-ci: " + (str(result.get("task", "")).strip().splitlines() or ["change"])[0]
    text = str(markup.plain_line(text, allowed_hosts()))
    return text[:120] + ("…" if len(text) > 120 else "")


def body(result: dict[str, Any], summary: str | None = None) -> str:
    """The change pull request's body: the run's summary.md (its verdict, rounds, change, the model's final
    message, budget) when the artifacts have it, else one made from result.json; sanitized either way."""
    if summary is not None:
        head = (f"prime-ci run {code(result.get('run_id', ''))} on base "
                f"{code(str(result.get('base_commit', ''))[:12])}.")
        return sanitize("\n\n".join([head, summary.strip(), FOOTER]), collapsible=True) + "\n"
    usage = result.get("usage") or {}
    cost = usage.get("cost_usd")
    task = " ".join(str(result.get("task", "")).split())
    lines = [
        f"prime-ci run {code(result.get('run_id', ''))} finished with {code(result.get('stop_reason', ''))} "
        f"(exit {result.get('exit_code')}) on base {code(str(result.get('base_commit', ''))[:12])}.",
        "",
        f"**Task:** {markup.text(task[:1000])}{'…' if len(task) > 1000 else ''}",
        "",
        f"**Model:** {code(result.get('model', ''))} · **turns:** {usage.get('turns')} · "
        f"**tokens:** {usage.get('total_tokens')} · **cost:** {'unknown' if cost is None else usd(cost)}",
        "",
    ]
    gates = result.get("gates") or []
    if gates:
        lines += ["| gate | result | attempts |", "|---|---|---|"]
        for g in gates:
            state = "pass" if g.get("passed") else "fail"
            lines.append(f"| {cell(g.get('name', ''))} | {state}{' (flaky)' if g.get('flaky') else ''} | "
                         f"{g.get('attempts')} |")  # fmt: skip
        lines.append("")
    files = result.get("changed_files") or []
    lines += [f"**Changed files ({len(files)}):**", ""] + [f"- {code(f)}" for f in files[:100]]
    if len(files) > 100:
        lines.append(f"- … and {len(files) - 100} more")
    flags = result.get("flags") or []
    if flags:
        lines += ["", "**Flags:**", ""] + [f"- {code(f)}" for f in flags[:20]]
    lines += ["", FOOTER]
    return sanitize("\n".join(lines)) + "\n"


# --- the pull request comment (DESIGN §14): one per pull request and workflow, for every outcome ----------------

# Each exit code (README: Exit codes) as the comment's heading says it; a test keeps it in step with prime-ci's.
OUTCOMES = {
    0: ("✅", "completed"), 1: ("❌", "gates still red"), 2: ("❌", "configuration error, nothing ran"),
    3: ("⏱️", "stopped by a budget"), 4: ("❌", "the model provider kept failing"), 5: ("❌", "sandbox unavailable"),
    6: ("❌", "artifacts could not be written"), 7: ("🛑", "security stop"), 8: ("❌", "no changes"),
    9: ("❌", "setup failed before any model call"), 10: ("❌", "environment error"), 70: ("💥", "internal error"),
    130: ("⏹️", "interrupted"), 143: ("⏹️", "interrupted"),
}
BUDGETS = {"max_turns": "the turn budget", "max_tokens": "the token budget", "max_wall": "the wall-clock budget",
           "max_cost": "the cost budget"}  # fmt: skip
FAILING_SHOWN = 10
COMMENT_FOOTER = ("One comment per pull request and workflow, updated by the prime-ci publish step on every run; "
                  "prime-ci never merges.")


def comment_text(text: object, limit: int = 300) -> str:
    """Text from the run (a reason, a test's name or message, a gate, a stop reason) as the comment shows it: one
    line, clipped, inside an inline code span, so no markup, link or ``@mention`` of it is read; the whole comment
    then goes through :func:`sanitize`: both are prime-ci's one escaping rule (``artifacts/markup.py``)."""
    line = " ".join(str(text).split())
    return code(line[:limit] + ("…" if len(line) > limit else ""))


def marker(workflow: str) -> str:
    """The hidden first line the comment is found by: ``<!-- prime-ci:WORKFLOW -->``, the workflow's name kept to
    characters that cannot end the HTML comment."""
    name = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9 _.:/()+-]", "", workflow)).strip(" -")[:100]
    return f"<!-- prime-ci:{name or 'workflow'} -->"


def last_failing(session: Path) -> tuple[int | None, list[dict[str, Any]]]:
    """The last gate run's failing tests (the session's last ``prime_ci.gate`` record): its round and the list."""
    found: tuple[int | None, list[dict[str, Any]]] = (None, [])
    try:
        with session.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if '"prime_ci.gate"' not in line:
                    continue
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                data = entry.get("data") if isinstance(entry, dict) else None
                if entry.get("customType") == "prime_ci.gate" and isinstance(data, dict):
                    failing = data.get("failing")
                    items = [f for f in failing if isinstance(f, dict)] if isinstance(failing, list) else []
                    found = (data.get("round") if isinstance(data.get("round"), int) else None, items)
    except OSError:
        pass
    return found


def _rounds(result: dict[str, Any]) -> str:
    rounds = [r for r in result.get("rounds") or [] if isinstance(r, dict)]
    if not rounds:
        return ""
    steps = " → ".join(f"{'✅' if r.get('passed') else '❌'} {comment_text(r.get('kind', 'full'), 20)}"
                       for r in rounds[:20]) + (" → …" if len(rounds) > 20 else "")
    green = result.get("time_to_green_s")
    when = f"green after {duration(green)}" if isinstance(green, int | float) else "never green"
    return f"**Rounds:** {steps} ({len(rounds)} gate run{'s' if len(rounds) != 1 else ''}, {when})"


def _budget_used(result: dict[str, Any]) -> str | None:
    """What ran out, used against its limit, when a budget stopped the run."""
    reason = str(result.get("stop_reason"))
    if reason not in BUDGETS:
        return None
    u, b = result.get("usage") or {}, result.get("budgets") or {}
    used, limit = {
        "max_turns": (f"{u.get('turns', 0)}", f"{b.get('max_turns')} turns"),
        "max_tokens": (f"{u.get('total_tokens', 0):,}", f"{b.get('max_tokens') or 0:,} tokens"),
        "max_wall": (duration(result.get("wall_s") or 0), duration(b.get("max_wall_s") or 0)),
        "max_cost": (usd(u.get("cost_usd") or 0), usd(b.get("max_cost_usd") or 0)),
    }[reason]
    return f"{BUDGETS[reason]}, {used} of {limit}"


def _failing_lines(round_no: int | None, failing: list[dict[str, Any]]) -> list[str]:
    if not failing:
        return []
    lines = [f"**Last failing tests**{f' (round {round_no})' if round_no is not None else ''}:", ""]
    for item in failing[:FAILING_SHOWN]:
        what = comment_text(item.get("test") or item.get("gate", ""), 200)
        gate = f" (gate {comment_text(item.get('gate', ''), 60)})" if item.get("test") else ""
        message = f": {comment_text(item['message'])}" if item.get("message") else ""
        lines.append(f"- {what}{gate}{message}")
    if len(failing) > FAILING_SHOWN:
        lines.append(f"- … and {len(failing) - FAILING_SHOWN} more (summary.md in the artifacts)")
    return [*lines, ""]


def comment(result: dict[str, Any] | None, *, exit_code: str = "", error: str = "", workflow: str = "",
            session: Path | None = None, note: str = "", refused: str = "", change_url: str = "",
            harness_url: str = "", env: dict[str, str] | None = None) -> str:
    """The pull request comment: the verdict, the rounds, the last failing tests when red, what stopped the run when
    a budget did, cost and time, and links to the run, its artifacts and the fix pull request. Without result.json
    (the run did not start: a configuration error, a failed preflight) it says why in one line."""
    env = dict(os.environ) if env is None else env
    code_ = result.get("exit_code") if result is not None else (int(exit_code) if exit_code.isdigit() else None)
    reason = error.strip() or (str(result.get("detail") or "") if result is not None else "")
    if isinstance(code_, int):
        icon, words = OUTCOMES.get(code_, ("❌", "failed"))
        if code_ == 0 and result is not None and result.get("rounds"):
            words = "gates green"
        stop = f"{comment_text(result['stop_reason'], 40)}, " if result is not None and result.get("stop_reason") \
            else ""
        head = f"## {icon} prime-ci: {words} ({stop}exit {code_})"
    elif reason:
        head = "## ❌ prime-ci: the run did not start"
    else:
        head = "## ❌ prime-ci: the run's job ended without a result"
    lines = [head, ""]
    if reason:
        lines += [f"> {comment_text(reason, 600)}", ""]
    if result is not None:
        usage = result.get("usage") or {}
        if rounds := _rounds(result):
            lines += [rounds, ""]
        if (stopped := _budget_used(result)) is not None:
            lines += [f"**Stopped by:** {stopped}", ""]
        if not result.get("success"):
            lines += _failing_lines(*last_failing(session)) if session is not None else []
        cost = usage.get("cost_usd")
        lines += [f"**Spent:** {usage.get('turns', 0)} turn(s) · {usage.get('total_tokens', 0):,} tokens · "
                  f"{'cost unknown' if cost is None else usd(cost)} · {duration(result.get('wall_s') or 0)}", ""]
    elif code_ == 2 or (code_ is None and reason):
        lines += ["No model call was made and nothing was spent.", ""]
    if change_url:
        lines += [f"**Fix pull request:** {change_url}", ""]
    if harness_url:
        lines += [f"**Harness proposal:** {harness_url}", ""]
    if refused:
        lines += [f"**Not published:** {comment_text(refused, 600)}", ""]
    if note:
        lines += [note, ""]
    links = []
    server, repository, run_id = (env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", ""),
                                  env.get("GITHUB_RUN_ID", ""))  # fmt: skip
    if re.fullmatch(r"https?://[A-Za-z0-9.-]+(:\d+)?", server) and re.fullmatch(r"[\w.-]+/[\w.-]+", repository) \
            and run_id.isdigit():
        run = f"{server}/{repository}/actions/runs/{run_id}"
        attempt = env.get("GITHUB_RUN_ATTEMPT", "")
        links = [f"[the workflow run]({run}/attempts/{attempt})" if attempt.isdigit() and attempt != "1"
                 else f"[the workflow run]({run})"]
        if result is not None:
            links.append(f"[its artifacts]({run}#artifacts) (summary.md, patch.diff, session.jsonl)")
    if links:
        lines += ["**Links:** " + " · ".join(links), ""]
    if result is not None:
        lines += [f"Run {comment_text(result.get('run_id', ''), 60)} on base "
                  f"{comment_text(str(result.get('base_commit', ''))[:12], 12)}. {COMMENT_FOOTER}"]
    else:
        lines += [COMMENT_FOOTER]
    return marker(workflow) + "\n" + sanitize("\n".join(lines)) + "\n"


def find_comment(listing: str, mark: str, author: str) -> str:
    """The id of this workflow's comment in ``gh api --paginate .../comments`` output (pages of JSON arrays, one
    after the other): the last one that starts with ``mark`` and was written by ``author`` (``[bot]``: any app's
    bot, for an app's installation token, which cannot ask who it is); '' when there is none."""
    decoder, pos, found = json.JSONDecoder(), 0, ""
    while pos < len(listing):
        while pos < len(listing) and listing[pos].isspace():
            pos += 1
        if pos >= len(listing):
            break
        try:
            page, pos = decoder.raw_decode(listing, pos)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"prime-ci publish: the comments listing is not JSON: {exc}") from None
        for item in page if isinstance(page, list) else []:
            user = item.get("user") or {} if isinstance(item, dict) else {}
            login = str(user.get("login", "")) if isinstance(user, dict) else ""
            mine = login.endswith("[bot]") and user.get("type") == "Bot" if author == "[bot]" else login == author
            if mine and str(item.get("body", "")).startswith(mark) and str(item.get("id", "")).isdigit():
                found = str(item["id"])
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="helper.py", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("field")
    p.add_argument("file")
    p.add_argument("key")
    p = sub.add_parser("json-field")
    p.add_argument("key")
    p = sub.add_parser("check-paths")
    p.add_argument("--result", help="result.json: its changed_files are checked too")
    p.add_argument("--forbidden", default="")
    p.add_argument("--allow", default="")
    p.add_argument("--max-files", type=int, default=50)
    p.add_argument("--only", action="append", help="every path must match one of these globs")
    p = sub.add_parser("stage-harness")
    p.add_argument("src")
    p.add_argument("dest")
    p = sub.add_parser("secrets")
    p.add_argument("patch")
    p = sub.add_parser("title")
    p.add_argument("result")
    p.add_argument("given", nargs="?", default="")
    p = sub.add_parser("body")
    p.add_argument("result")
    p = sub.add_parser("sanitize")
    p.add_argument("file")
    p = sub.add_parser("comment")
    p.add_argument("--result", default="", help="result.json (absent when the run did not start)")
    p.add_argument("--exit-code", default="", help="the run's exit code as its job reported it")
    p.add_argument("--error", default="", help="the one-line reason the run or the preflight gave")
    p.add_argument("--workflow", default="")
    p.add_argument("--note", default="", help="the publish step's own words (not escaped)")
    p.add_argument("--refused", default="", help="why publishing was refused")
    p.add_argument("--change-url", default="")
    p.add_argument("--harness-url", default="")
    p = sub.add_parser("marker")
    p.add_argument("workflow")
    p = sub.add_parser("md-text")
    p.add_argument("text")
    p = sub.add_parser("find-comment")
    p.add_argument("marker")
    p.add_argument("author")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "field":
            print(field(load_json(args.file), args.key))
        elif args.cmd == "json-field":
            try:
                print(field(json.loads(sys.stdin.read()), args.key))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"prime-ci publish: not JSON: {exc}") from None
        elif args.cmd == "check-paths":
            extra = list(load_json(args.result).get("changed_files") or []) if args.result else []
            check_paths(sys.stdin.buffer.read(), extra, words(args.forbidden), words(args.allow), args.max_files,
                        args.only)  # fmt: skip
        elif args.cmd == "stage-harness":
            stage_harness(Path(args.src), Path(args.dest))
        elif args.cmd == "secrets":
            scan_secrets(Path(args.patch).read_text(encoding="utf-8", errors="replace"))
        elif args.cmd == "title":
            print(title(load_json(args.result), args.given))
        elif args.cmd == "body":
            summary = Path(args.result).with_name("summary.md")
            text = summary.read_text(encoding="utf-8", errors="replace") if summary.is_file() else None
            sys.stdout.write(body(load_json(args.result), text))
        elif args.cmd == "sanitize":
            sys.stdout.write(sanitize(Path(args.file).read_text(encoding="utf-8", errors="replace"), collapsible=True))
        elif args.cmd == "comment":
            result = load_json(args.result) if args.result else None
            session = Path(args.result).with_name("session.jsonl") if args.result else None
            sys.stdout.write(comment(result if isinstance(result, dict) else None, exit_code=args.exit_code,
                                     error=args.error, workflow=args.workflow, session=session, note=args.note,
                                     refused=args.refused, change_url=args.change_url, harness_url=args.harness_url))
        elif args.cmd == "md-text":
            print(markup.text(args.text))
        elif args.cmd == "marker":
            print(marker(args.workflow))
        elif args.cmd == "find-comment":
            print(find_comment(sys.stdin.read(), args.marker, args.author))
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
