"""Record the bench demo's replay sessions, and check that they replay to the intended verdicts.

    python scripts/record_bench_demo.py              # re-record every task (and verify)
    python scripts/record_bench_demo.py TASK_ID ...  # only these tasks
    python scripts/record_bench_demo.py --verify     # replay the bundled recordings, record nothing

Each task of src/prime_ci/bench_demo/suite.toml runs as an ordinary `prime-ci run` against the scripted
OpenAI-compatible server (prime_ci.testing.ScriptedServer) playing the model with the steps below: the real
kernel executes every cell and the real gates decide. The run's session.jsonl and its rlm children's
children/<name>/session.jsonl are kept under recordings/<harness>/<task id>/; a task whose model behaves the
same under both harness states is recorded once, under recordings/default/<task id>/. The recordings carry
the scripted server's token counts priced at --price-per-mtok 3,15,0.3, so a replay reports a cost.

Verification replays each recording with `prime-ci run --model replay:...` under the harness it belongs to,
then applies the hidden test patch to the run's patch.diff on a fresh clone of the base commit and runs the
hidden tests, as the bench does for its verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.bench.preflight import FIXED  # the bench's base commits: the same tree gives the same commit
from prime_ci.isolation.worktree import IDENTITY, commit_directory
from prime_ci.testing import ScriptedServer, Step, ipython, reply

BUNDLE = Path(__file__).resolve().parents[1] / "src" / "prime_ci" / "bench_demo"
SUITE = BUNDLE / "suite.toml"
HARNESSES = ("base", "refined")
MODEL = "openai/recorded-demo"
PRICES = "3,15,0.3"
PYTEST = "!python -m pytest -q -p no:cacheprovider"


@dataclass(frozen=True)
class Wait:
    """A root reply that ends the turn to wait for a sub-agent: skipped when the sub-agent's message has
    already arrived (the engine would run the gates at once instead of waiting)."""

    step: Step


@dataclass(frozen=True)
class Child:
    task: str  # the text the root passes to rlm(): the child's requests are recognised by it
    steps: list[Step]


@dataclass(frozen=True)
class Recording:
    steps: list[Step | Wait]
    stop_reason: str = "completed"
    solved: bool = True  # the bench's verdict: gates passed in the final round and the hidden tests pass
    children: dict[str, Child] = field(default_factory=dict)


def edit(path: str, *pairs: tuple[str, str], imports: bool = True) -> str:
    """A cell that replaces text in one file, checking first that the old text is there."""
    lines = ["from pathlib import Path", ""] if imports else []
    lines += [f"p = Path({path!r})", "src = p.read_text()"]
    for old, new in pairs:
        lines += [f"assert {old!r} in src", f"src = src.replace({old!r}, {new!r})"]
    return "\n".join([*lines, "p.write_text(src)", "print('edited', p)"])


NODE_HELPER = (
    "import subprocess\n\n"
    "def node(js):\n"
    "    out = subprocess.run(['node', '-e', js], capture_output=True, text=True)\n"
    "    print(out.stdout + out.stderr)\n\n"
)

# ---- the recorded sessions -----------------------------------------------------------------------------

PAGINATION = Recording([
    ipython(PYTEST, text="Let me run the test suite to see what fails."),
    ipython("print(open('pages.py').read())",
            text="Both failures are about a partial last page. Reading pages.py."),
    ipython(edit("pages.py", ("return max(1, total // per_page)", "return max(1, -(-total // per_page))"))
            + "\n\nimport importlib\nimport pages\n\nimportlib.reload(pages)\n"
            "print([pages.page_count(total, 5) for total in (0, 1, 5, 10, 11)])",
            text="`page_count` floors the division, so a partial last page is dropped; it has to round up. "
                 "Using ceiling division."),
    ipython(PYTEST, text="Running the whole suite again."),
    reply("`page_count()` divided with `//`, which drops a partial last page; it now rounds up (ceiling "
          "division), so 11 orders at 5 per page give 3 pages and the links point to page 3. All tests pass."),
])

CART = Recording([
    ipython("!node --test 2>&1 | grep -E '^(not )?ok|error:'", text="Running the tests first."),
    ipython("!grep -rn 'price' src/ test/",
            text="Everything that touches a price fails. Let me see where prices are read."),
    ipython("for name in ('src/cart.js', 'src/receipt.js'):\n    print(f'--- {name}')\n    print(open(name).read())",
            text="The catalog only has `unitPrice` (cents) now, but cart.js and receipt.js still read the old "
                 "dollar `price`."),
    ipython(edit("src/cart.js", ("sum + Math.round(line.price * 100) * line.quantity",
                                 "sum + line.unitPrice * line.quantity"))
            + "\n\n" + edit("src/receipt.js", ("@ $${line.price.toFixed(2)}", "@ ${formatCents(line.unitPrice)}"),
                            imports=False),
            text="Switching both to `unitPrice`: the cart sums cents directly, the receipt formats them with "
                 "formatCents."),
    ipython("!node --test 2>&1 | tail -n 8", text="Running the whole suite."),
    reply("The v2 rename was missed in two places: `Cart.subtotal()` (src/cart.js) and the receipt lines "
          "(src/receipt.js) still read the removed dollar `price`. Both use `unitPrice` in cents now; all 6 "
          "tests pass."),
])

STATS_TASK = (
    "Fix stats.py so that test_stats.py passes: total_by_region() must add up every sale of a region and "
    "top_regions() must list the highest totals first. Edit only stats.py (I am fixing csvio.py at the same "
    "time). Check with `python -m pytest -q -p no:cacheprovider test_stats.py`, then send me a one-line summary "
    "with agent_message.send(..., receiver_role='parent')."
)
SALES = Recording(
    [
        ipython(PYTEST + " 2>&1 | tail -n 8", text="Running the test suite."),
        ipython(f"stats = await rlm({STATS_TASK!r}, name='stats')\nprint(stats)",
                text="Two independent parts fail: the CSV parser (test_csvio.py) and the aggregates "
                     "(test_stats.py); test_report.py needs both. I'll hand stats.py to a sub-agent and fix "
                     "csvio.py myself meanwhile."),
        ipython("print(open('csvio.py').read())", text="Reading the parser."),
        ipython(edit("csvio.py", ("Sale(date.strip(), region, Decimal(int(float(amount))))",
                                  "Sale(date.strip(), region.strip().lower(), Decimal(amount.strip()))"))
                + f"\n{PYTEST} test_csvio.py",
                text="parse_sales drops the cents through int(float(...)) and never normalises the region. A "
                     "Decimal made from the text keeps the amount exact."),
        Wait(reply("csvio.py is fixed and test_csvio.py passes. Waiting for the stats sub-agent before running "
                   "the whole suite.")),
        ipython(PYTEST, text="The stats sub-agent reports stats.py fixed. Running the whole suite."),
        reply("Fixed both halves: csvio.py keeps exact cents (a Decimal from the text) and normalises region "
              "names; the stats sub-agent fixed stats.py (totals add up per region, top regions sort highest "
              "first). All 8 tests pass."),
    ],
    children={"stats": Child(STATS_TASK, [
        ipython(PYTEST + " test_stats.py 2>&1 | tail -n 5", text="Running the stats tests."),
        ipython("print(open('stats.py').read())", text="Reading stats.py."),
        ipython(edit("stats.py", ("totals[sale.region] = sale.amount",
                                  "totals[sale.region] = totals.get(sale.region, Decimal(0)) + sale.amount"),
                     ("key=lambda item: item[1])", "key=lambda item: item[1], reverse=True)"))
                + f"\n{PYTEST} test_stats.py",
                text="total_by_region overwrites a region's total with its latest sale, and top_regions sorts "
                     "ascending. Fixing both."),
        ipython("print(await agent_message.send('stats.py fixed: total_by_region() adds up every sale per region "
                "and top_regions() sorts by total, highest first; test_stats.py passes (3 tests).', "
                "receiver_role='parent'))", text="Reporting to the parent."),
        reply("Done: stats.py is fixed and the parent has the summary."),
    ])},
)

DURATION = Recording([
    ipython("print(open('duration.js').read())", text="Reading the parser."),
    ipython(edit("duration.js", ("total = Number(value) * UNITS[unit];", "total += Number(value) * UNITS[unit];"))
            + "\n!node --test --test-name-pattern='combined' 2>&1 | grep -E '^(not )?ok|^# (pass|fail|skipped)'",
            text="The loop assigns `total` for every component instead of adding to it, so only the last one "
                 "counts. Fixing that and running the test for combined durations."),
    reply("parseDuration now adds up every component: '1h30m' gives 5400 and the combined-duration test passes."),
    ipython(edit("duration.js", ("/(\\d+)([hms])/g", "/(\\d+)([dhms])/g"))
            + "\n!node --test 2>&1 | grep -E '^(not )?ok|^# (pass|fail)'",
            text="The gate found a second failure: days ('2d', and the round trip of 86400 s and more) are "
                 "rejected because the pattern only accepts h, m and s although UNITS has d. Adding d, and "
                 "running the whole suite this time."),
    reply("Fixed two bugs in parseDuration: components are added up instead of overwritten ('1h30m' = 5400), and "
          "the pattern accepts the d unit that UNITS already had ('2d', '1d12h'). All 6 tests pass."),
])

TRUNCATE_READ = ipython(f"print(open('text.py').read())\n{PYTEST} 2>&1 | tail -n 4",
                        text="Reading text.py and running the tests.")
TRUNCATE_BASE = Recording([
    TRUNCATE_READ,
    ipython(edit("text.py", ("return text[:width] + ELLIPSIS", "return text[: width - len(ELLIPSIS)] + ELLIPSIS"))
            + "\n\nimport importlib\nimport text\n\nimportlib.reload(text)\n"
            "print(repr(text.truncate('The quick brown fox jumps over the lazy dog', 12)))\n" + PYTEST,
            text="truncate() appends the ellipsis after `width` characters, so the result is 3 characters too "
                 "long. Reserving room for it."),
    reply("truncate() now cuts the text at width - 3 and appends '...', so a preview is exactly `width` "
          "characters wide; the tests pass."),
], solved=False)
TRUNCATE_FIXED = '''    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS):
        return text[:width]
    return text[: width - len(ELLIPSIS)] + ELLIPSIS'''
TRUNCATE_REFINED = Recording([
    TRUNCATE_READ,
    ipython("import text\n\nfor s, w in [('Build passed', 20), ('twelve chars', 12), ('new message', 2)]:\n"
            "    print(repr(text.truncate(s, w)), len(text.truncate(s, w)), 'width', w)",
            text="Before changing it, the edge cases the task implies, as the harness note asks: text that "
                 "already fits must come back unchanged, and a width smaller than the ellipsis must still be "
                 "respected."),
    ipython(edit("text.py", ("    return text[:width] + ELLIPSIS", TRUNCATE_FIXED))
            + "\n\nimport importlib\n\nimportlib.reload(text)\n"
            "for s, w in [('Build passed', 20), ('twelve chars', 12), ('new message', 2),\n"
            "             ('The quick brown fox jumps over the lazy dog', 12)]:\n"
            "    print(repr(text.truncate(s, w)), len(text.truncate(s, w)), 'width', w)\n"
            f"print(text.preview('Grace Hopper', 'Ship it', 30))\n{PYTEST}",
            text="All three are wrong today. Returning fitting text unchanged, cutting without an ellipsis when "
                 "the width cannot even hold '...', and otherwise reserving room for it."),
    reply("truncate() returns text that fits unchanged, otherwise cuts at width - 3 and appends '...'; below a "
          "width of 3 it just cuts (there is no room for the ellipsis), so the result never exceeds `width`. "
          "The whole suite passes."),
])

MONEY_TESTS = "!node --test 2>&1 | grep -E '^(not )?ok'"
MONEY_READ = ipython("print(open('money.js').read())", text="Reading money.js.")
SPLIT_OLD = "  const share = roundCents(total / people);\n  return Array.from({ length: people }, () => share);"
SPLIT_NEW = ("  const cents = Math.round(total * 100);\n  const share = Math.floor(cents / people);\n"
             "  const extra = cents - share * people;\n"
             "  return Array.from({ length: people }, (_, i) => (share + (i < extra ? 1 : 0)) / 100);")
MONEY_BASE = Recording([
    ipython(MONEY_TESTS, text="Running the tests."),
    MONEY_READ,
    ipython(edit("money.js", ("return Math.floor(amount * 100) / 100;", "return Math.round(amount * 100) / 100;"),
                 (SPLIT_OLD, SPLIT_NEW))
            + "\n\n" + NODE_HELPER
            + "node(\"const m = require('./money'); console.log(m.roundCents(19.99), m.roundCents(1.234), "
              "m.splitBill(10, 3), m.splitBill(100, 7))\")",
            text="roundCents truncates with Math.floor, and splitBill gives everybody the same rounded share, so "
                 "the shares do not add up. Rounding properly, and splitting whole cents with the leftover cents "
                 "on the first shares."),
    reply("roundCents rounds instead of truncating, and splitBill hands the leftover cents to the first shares so "
          "they add up to the bill."),
    ipython(edit("money.js", ("return Math.round(amount * 100) / 100;",
                              "return Math.round((amount + Number.EPSILON) * 100) / 100;"))
            + "\n\nnode(\"const m = require('./money'); console.log(m.roundCents(1.005), m.roundCents(1.255), "
              "m.roundCents(0.125), m.withTax(10, 8.25))\")",
            text="The gate shows the halves going down: 1.005 * 100 is 100.49999999999999 in binary floating "
                 "point, so Math.round rounds it down. Nudging the amount by Number.EPSILON before scaling."),
    reply("roundCents adds Number.EPSILON before rounding, so the binary representation error no longer pushes "
          "halves down (1.005 -> 1.01, 1.255 -> 1.26), and the split shares add up to the bill."),
], stop_reason="gates_failed", solved=False)
MONEY_REFINED = Recording([
    ipython(MONEY_TESTS, text="Running the whole suite first, as the harness notes ask."),
    MONEY_READ,
    ipython(NODE_HELPER + "node('for (const x of [1.005, 1.255, 0.125, -0.125, -1.005, 10.825]) "
                          "console.log(x, x * 100)')",
            text="The edge cases the task implies: halves, amounts that binary floating point cannot hold "
                 "exactly, refunds (negative amounts) and splits that do not divide evenly. First, how those "
                 "amounts look scaled to cents."),
    ipython(edit("money.js", ("return Math.floor(amount * 100) / 100;",
                              "return Number(Math.round(Number(amount + 'e2')) + 'e-2');"), (SPLIT_OLD, SPLIT_NEW))
            + "\n\nnode(\"const m = require('./money'); for (const x of [1.005, 1.255, 0.125, -0.125, -1.005]) "
              "console.log(x, m.roundCents(x)); console.log(m.splitBill(10, 3))\")",
            text="Scaling in exponent notation avoids the representation error ('1.005e2' is exactly 100.5). "
                 "Also splitting in whole cents, leftover cents on the first shares."),
    ipython("node('console.log([12.5, -12.5, 100.5, -100.5].map(Math.round), [-12.5, -100.5].map(Math.trunc))')",
            text="Positive halves are right now, but -0.125 gives -0.12: Math.round rounds halves towards "
                 "+Infinity, so negative halves go the wrong way. Checking the alternatives on negative amounts "
                 "before changing the code again."),
    ipython("node('for (const x of [-0.125, -1.005, -2.675]) console.log(x, x.toFixed(2), "
            "(-x).toFixed(2))')",
            text="toFixed works on the magnitude and adds the sign; does it avoid the representation error?"),
    ipython("node(\"const f = new Intl.NumberFormat('en-US', { maximumFractionDigits: 2, roundingMode: "
            "'halfExpand', useGrouping: false }); for (const x of [1.005, -1.005, -0.125, 2.675]) "
            "console.log(x, f.format(x))\")",
            text="toFixed still sees 1.00499999... for 1.005. Intl.NumberFormat has an explicit half-away-from-"
                 "zero rounding mode; trying it on the same amounts."),
    ipython("node(\"const m = require('./money'); console.log(m.splitBill(-10, 3), m.splitBill(0.05, 2), "
            "m.splitBill(-0.05, 2))\")",
            text="That rounds every case correctly, but returns strings. Before switching, the note's other edge "
                 "case: splitting a refund."),
], stop_reason="max_turns", solved=False)

TAGS_READ = ipython(f"print(open('tags.py').read())\n{PYTEST} 2>&1 | tail -n 3",
                    text="Reading tags.py and running the tests.")
TAGS_BASE = Recording([
    TAGS_READ,
    ipython(edit("tags.py", ("return sorted(set(tags))", "return list(dict.fromkeys(tags))")) + f"\n{PYTEST}",
            text="unique_tags() sorts the set of tags, which loses the author's order. dict.fromkeys keeps each "
                 "tag's first occurrence, in input order."),
    reply("unique_tags() now de-duplicates with dict.fromkeys, which keeps each tag's first occurrence in the "
          "author's order instead of sorting; all tests pass."),
])
TAGS_NORMALISED = '''    seen: set[str] = set()
    result: list[str] = []
    for tag in tags:
        key = " ".join(tag.split()).lower()
        if key and key not in seen:
            seen.add(key)
            result.append(key)
    return result'''
TAGS_REFINED = Recording([
    TAGS_READ,
    ipython(edit("tags.py", ("    return sorted(set(tags))", TAGS_NORMALISED))
            + "\n\nimport importlib\nimport tags\n\nimportlib.reload(tags)\n"
            "print(tags.unique_tags(['Python', ' python ', 'CI', '', 'ci', 'agents']))",
            text="The harness note asks me to handle the edge cases the task implies: a tag repeated with "
                 "different case or stray spaces ('Python', ' python ') is a repeat too, and a blank tag is no "
                 "tag. Normalising before de-duplicating, in the author's order."),
    ipython(PYTEST, text="Running the whole suite."),
    reply("unique_tags() keeps the author's order and treats tags that differ only in case or surrounding "
          "whitespace as repeats (blank tags are dropped); the whole suite passes."),
], solved=False)

SLUG = Recording([
    ipython("print(open('slug.js').read())", text="Reading slug.js."),
    ipython(edit("slug.js", (".replace(/[^a-z0-9]+/, '-')", ".replace(/[^a-z0-9]+/g, '-')"))
            + "\n!node --test 2>&1 | grep -E '^(not )?ok'",
            text="The replace that turns separators into dashes has no g flag, so only the first run is replaced. "
                 "Adding it."),
    reply("slugify's separator replace lacked the g flag, so only the first space became a dash; now every run of "
          "separators becomes one dash. All 4 tests pass."),
])

# task id -> harness label -> recording; "default" serves every harness
RECORDINGS: dict[str, dict[str, Recording]] = {
    "pagination-last-page": {"default": PAGINATION},
    "cart-unit-price": {"default": CART},
    "sales-summary": {"default": SALES},
    "duration-components": {"default": DURATION},
    "preview-truncate": {"base": TRUNCATE_BASE, "refined": TRUNCATE_REFINED},
    "till-rounding": {"base": MONEY_BASE, "refined": MONEY_REFINED},
    "tag-order": {"base": TAGS_BASE, "refined": TAGS_REFINED},
    "slug-separators": {"default": SLUG},
}

# ---- running -------------------------------------------------------------------------------------------


class RootScript:
    """The root's steps, answered in order; a Wait step is skipped once a child's message is in the request."""

    def __init__(self, steps: Sequence[Step | Wait]) -> None:
        self.steps = list(steps)

    def __call__(self, body: dict[str, Any]) -> Step | None:
        while self.steps:
            step = self.steps.pop(0)
            if not isinstance(step, Wait):
                return step
            if "[from child:" not in json.dumps(body.get("messages", [])):
                return step.step
        return None


def child_of(task: str) -> Callable[[dict[str, Any]], bool]:
    def predicate(body: dict[str, Any]) -> bool:
        messages = body.get("messages") or []
        first = str(messages[1].get("content", "")) if len(messages) > 1 else ""
        return first.startswith("[task from parent]") and task in first

    return predicate


def git(args: Sequence[str], cwd: Path) -> str:
    env = {**os.environ, **FIXED, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    proc = subprocess.run(["git", *IDENTITY, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def make_repo(src: Path, dest: Path) -> str:
    """The bench's own git repository of the bundled plain directory (the same commit the bench makes); its commit."""
    return commit_directory(src, dest, f"{src.name}: bench base", env=FIXED)


def run_flags(task: dict[str, Any]) -> list[str]:
    flags = ["--task", task["task"]]
    for gate in task.get("gates", []):
        flags += ["--gate", gate]
    for setup in task.get("setup", []):
        flags += ["--setup", setup]
    if "python" in task:
        flags += ["--python", task["python"].replace("{python}", sys.executable)]
    for key in ("max_turns", "max_wall", "max_cost", "max_tokens", "max_gate_retries"):
        if key in task:
            flags += [f"--{key.replace('_', '-')}", str(task[key])]
    return flags


def prime_run(repo: Path, harness: str, out: Path, task: dict[str, Any], model: list[str]) -> dict[str, Any]:
    state = out.parent / f"harness-{out.name}"
    shutil.copytree(BUNDLE / "harness" / harness, state)
    cmd = [sys.executable, "-m", "prime_ci", "run", str(repo), *model, "--harness", str(state), "--out", str(out),
           *run_flags(task)]
    proc = subprocess.run(cmd, env={**os.environ, "OPENAI_API_KEY": "none"}, capture_output=True, text=True,
                          check=False, timeout=600)
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    try:
        result: dict[str, Any] = json.loads((out / "result.json").read_text())
    except (OSError, ValueError):
        raise SystemExit(f"{task['id']}: no result.json (exit {proc.returncode}):\n{proc.stderr[-3000:]}") from None
    return result


def hidden_check(task: dict[str, Any], repo: Path, base: str, out: Path, work: Path) -> bool | None:
    """The bench's hidden check: fresh clone at the base commit + the run's patch + the test patch, then the ids."""
    if "test_patch" not in task and not task.get("fail_to_pass") and not task.get("pass_to_pass"):
        return None
    clone = work / "hidden"
    subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True, capture_output=True)
    git(["checkout", "--quiet", base], clone)
    for patch in (out / "patch.diff", SUITE.parent / task.get("test_patch", "")):
        if patch.is_file() and patch.stat().st_size:
            subprocess.run(["git", "apply", str(patch)], cwd=clone, check=True, capture_output=True)
    ids = [*task.get("fail_to_pass", []), *task.get("pass_to_pass", [])]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids], cwd=clone,
                          capture_output=True, text=True, check=False)
    (work / "hidden.log").write_text(proc.stdout + proc.stderr)
    return proc.returncode == 0


def verdict(task: dict[str, Any], result: dict[str, Any], hidden: bool | None) -> bool:
    gates = result.get("gates") or []
    return result["stop_reason"] == "completed" and all(g["passed"] for g in gates) and hidden is not False


def record(task: dict[str, Any], label: str, rec: Recording, work: Path) -> str:
    repo = work / "repo"
    base = make_repo(SUITE.parent / task["repo"], repo)
    with ScriptedServer(RootScript(rec.steps)) as srv:
        for child in rec.children.values():
            srv.route(child_of(child.task), child.steps)
        result = prime_run(repo, "base" if label == "default" else label, work / "out", task,
                           ["--model", MODEL, "--api-base", srv.url, "--price-per-mtok", PRICES])
    solved = verdict(task, result, hidden_check(task, repo, base, work / "out", work))
    target = SUITE.parent / "recordings" / label / task["id"]
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copy(work / "out" / "session.jsonl", target / "session.jsonl")
    for name in rec.children:
        (target / "children" / name).mkdir(parents=True)
        shutil.copy(work / "out" / "children" / name / "session.jsonl", target / "children" / name / "session.jsonl")
    got = f"{result['stop_reason']}, {'solved' if solved else 'unsolved'}"
    want = f"{rec.stop_reason}, {'solved' if rec.solved else 'unsolved'}"
    return got if got == want else f"{got} -- EXPECTED {want}"


def verify(task: dict[str, Any], harness: str, work: Path) -> str:
    recordings = RECORDINGS[task["id"]]
    label = harness if harness in recordings else "default"
    rec = recordings[label]
    replay = SUITE.parent / "recordings" / label / task["id"] / "session.jsonl"
    repo = work / "repo"
    base = make_repo(SUITE.parent / task["repo"], repo)
    result = prime_run(repo, harness, work / "out", task, ["--model", f"replay:{replay}"])
    solved = verdict(task, result, hidden_check(task, repo, base, work / "out", work))
    cost = result.get("usage", {}).get("cost_usd")
    got = f"{result['stop_reason']}, {'solved' if solved else 'unsolved'}"
    want = f"{rec.stop_reason}, {'solved' if rec.solved else 'unsolved'}"
    return (got if got == want else f"{got} -- EXPECTED {want}") + f" (cost {cost})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", help="task ids (default: all)")
    parser.add_argument("--verify", action="store_true", help="only replay the bundled recordings")
    parser.add_argument("--no-verify", action="store_true", help="record without replaying afterwards")
    parser.add_argument("--keep", action="store_true", help="keep the temporary run directories")
    args = parser.parse_args()
    suite = tomllib.loads(SUITE.read_text())
    tasks = [{**suite.get("defaults", {}), **t} for t in suite["task"]]
    unknown = set(args.tasks) - {t["id"] for t in tasks}
    if unknown or {t["id"] for t in tasks} != set(RECORDINGS):
        raise SystemExit(f"unknown task ids {sorted(unknown)}, or suite.toml and RECORDINGS disagree")
    tasks = [t for t in tasks if not args.tasks or t["id"] in args.tasks]
    root = Path(tempfile.mkdtemp(prefix="prime-ci-bench-record-"))
    failed = False
    try:
        jobs: list[tuple[str, dict[str, Any], str]] = []
        if not args.verify:
            jobs += [("record", t, label) for t in tasks for label in RECORDINGS[t["id"]]]
        if not args.no_verify:
            jobs += [("verify", t, harness) for t in tasks for harness in HARNESSES]
        for n, (what, task, label) in enumerate(jobs):
            work = root / f"{n:02d}-{what}-{task['id']}-{label}"
            work.mkdir()
            rec = RECORDINGS[task["id"]].get(label)
            line = record(task, label, rec, work) if what == "record" and rec else verify(task, label, work)
            failed |= "EXPECTED" in line
            print(f"{what:7} {task['id']:22} {label:8} {line}", flush=True)
    finally:
        if args.keep:
            print(f"run directories kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
