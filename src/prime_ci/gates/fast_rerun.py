"""Fast feedback on retry rounds: rerun only the tests that failed in a gate's last full run.

A gate gets a fast command from its ``fast`` template (``{tests}`` becomes the failing test ids,
shell-quoted) or one derived from its command: for pytest, the command with its positional arguments and
its cache/stop-early/coverage options dropped (xdist, plugins and configuration are kept) and the node ids
appended; for unittest, Django, node --test, jest, vitest, go test and cargo test, see
:mod:`prime_ci.gates.rerun_commands`; what starts the runner (``uv run``, ``coverage run``...) is read in
:mod:`prime_ci.gates.launchers`. Anything the derivation does not fully understand (shell syntax, variables,
options of unknown arity) yields no fast command: that gate then always runs in full. A derived command has
coverage thresholds off (:mod:`prime_ci.gates.coverage_off`). What it left out of the gate's, and a threshold
turned off, is said to the model with the fast round's result.

A fast run only ever shortens a round that is still failing: it counts as failing when it failed and
still names failing tests (or timed out). A failure that names no test (a coverage threshold not turned
off, a node id that no longer exists) is inconclusive and the full gates run.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prime_ci.gates import coverage_off
from prime_ci.gates.launchers import SHELL_SPECIAL, entry, split_assignments
from prime_ci.gates.rerun_commands import Rerunner, Target, derive_rerunner
from prime_ci.gates.runner import GateResult, run_gate
from prime_ci.gates.specs import GateSpec
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.paths import inside, relative_name

MAX_TESTS = 50

# pytest options that take a value as the next word (or after ``=``), kept in the fast command.
_KEEP_VALUE = {
    "-k", "-m", "-p", "-c", "-o", "-r", "-W", "--tb", "--junitxml", "--junit-xml", "--junit-prefix", "--rootdir",
    "--confcutdir", "--basetemp", "--ignore", "--ignore-glob", "--deselect", "--import-mode", "--durations",
    "--durations-min", "--log-level", "--log-format", "--log-date-format", "--log-cli-level", "--log-cli-format",
    "--log-cli-date-format", "--log-file", "--log-file-level", "--log-file-mode", "--log-file-format",
    "--log-file-date-format", "--capture", "--color", "--code-highlight", "--override-ini", "--config-file",
    "--assert", "--verbosity", "--doctest-glob", "--doctest-report", "--timeout", "--timeout-method",
    "--reruns", "--reruns-delay", "--only-rerun", "--randomly-seed", "--show-capture",
    "-n", "--numprocesses", "--maxprocesses", "--dist", "--max-worker-restart", "--tx", "--rsyncdir",
}
# Options dropped with their value: stopping early and coverage thresholds make no sense for a few tests.
_DROP_VALUE = {
    "--maxfail", "--cov-report", "--cov-config", "--cov-fail-under", "--cov-context", "--last-failed-no-failures",
    "--lfnf",
}
# argparse ``nargs="?"``: the next word is the value unless it looks like an option.
_DROP_OPTIONAL_VALUE = {"--cov", "--debug"}
_DROP_FLAGS = {
    "-x", "--exitfirst", "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw",
    "--stepwise", "--sw-skip", "--stepwise-skip", "--cov-append", "--cov-branch", "--no-cov-on-fail", "--pdb",
    "--trace", "-f", "--looponfail",
}
_KEEP_FLAGS = {
    "--strict-markers", "--strict-config", "--strict", "--runxfail", "--disable-warnings", "--disable-pytest-warnings",
    "--no-header", "--no-summary", "--pyargs", "--doctest-modules", "--showlocals", "--full-trace", "--verbose",
    "--quiet", "--no-cov", "--noconftest", "--keep-duplicates", "--continue-on-collection-errors",
    "--doctest-continue-on-collection-errors", "--benchmark-disable", "--benchmark-skip", "--force-sugar",
}
# Modes that do not run the tests: such a gate is not a test run to narrow.
_REFUSE = {"--co", "--collect-only", "--fixtures", "--fixtures-per-test", "--markers", "--version", "-h", "--help",
           "--setup-only", "--setup-plan", "--cache-show", "--cache-clear"}
_SHORT_VALUE = {"k", "m", "p", "c", "o", "r", "W", "n"}
_SHORT_FLAGS = {"v", "q", "s", "l", "x"}


def derive_pytest_fast(command: str) -> str | None:
    """A fast template for a plain pytest command (``pytest``, ``python -m pytest``, ``uv run pytest``...).

    None when the command is anything else, or uses shell syntax or options this cannot read for sure.
    """
    derived = pytest_fast(command)
    return derived[0] if derived else None


def pytest_fast(command: str) -> tuple[str, list[str]] | None:
    """The fast template of a pytest command and the options it leaves out."""
    if SHELL_SPECIAL & set(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    prefix, words = split_assignments(words)
    launcher = _pytest_launcher(words)
    if launcher is None:
        return None
    read = _pytest_options(words[launcher:])
    if read is None:
        return None
    kept, dropped = read
    return " ".join([*prefix, shlex.join([*words[:launcher], *kept]), "{tests}"]), dropped


def _pytest_launcher(words: list[str]) -> int | None:
    """How many leading words start pytest (``pytest`` itself included), or None if these do not."""
    found = entry(words)
    if found is None or found.name not in (("pytest",) if found.module else ("pytest", "py.test")):
        return None
    return found.args


def _pytest_options(args: list[str]) -> tuple[list[str], list[str]] | None:
    """pytest's arguments minus positionals and the dropped options (also returned); None when unsure."""
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        takes_next = nxt is not None and not nxt.startswith("-")
        if word == "--":
            break  # only positionals follow
        if not word.startswith("-") or word == "-":
            i += 1  # a positional: a path, a node id or a package; the failing ids replace them
            continue
        name = word.split("=", 1)[0]
        if name in _REFUSE:
            return None
        if word.startswith("--"):
            inline = "=" in word
            if name in _KEEP_VALUE:
                if inline:
                    kept.append(word)
                elif nxt is None:
                    return None
                else:
                    kept += [word, nxt]
                    i += 1
            elif name in _DROP_VALUE:
                dropped.append(word if inline or nxt is None else f"{word} {nxt}")
                i += 0 if inline else 1
            elif name in _DROP_OPTIONAL_VALUE:
                dropped.append(word if inline or not takes_next else f"{word} {nxt}")
                i += 0 if inline or not takes_next else 1
            elif name in _DROP_FLAGS:
                dropped.append(word)
            elif name in _KEEP_FLAGS:
                kept.append(word)
            elif inline or not takes_next:
                kept.append(word)  # an unknown flag, or an unknown option given as --opt=value
            else:
                return None  # an unknown option before a plain word: its value, or a path?
            i += 1
            continue
        if word[1] in _SHORT_VALUE:
            value = [] if len(word) > 2 else [nxt]
            if None in value:
                return None
            kept += [word, *filter(None, value)]
            i += 1 + len(value)
            continue
        flags = word[1:]
        if not set(flags) <= _SHORT_FLAGS:
            return None
        if "x" in flags:
            dropped.append("-x")
        if flags := flags.replace("x", ""):
            kept.append("-" + flags)
        i += 1
    return kept, dropped


def render(template: str, tests: Sequence[str]) -> str:
    return template.replace("{tests}", " ".join(shlex.quote(t) for t in tests))


def pytest_node_ids(ids: Iterable[str], root: Path) -> list[str]:
    """The ids that are runnable node ids (``path::name``, the file in ``root``), JUnit classnames converted."""
    out: list[str] = []
    for test in ids:
        node = _node_id(test, root)
        if node is not None and node not in out:
            out.append(node)
    return out


def _node_id(test: str, root: Path) -> str | None:
    if "::" not in test or test.startswith(("-", "/")) or "\0" in test:
        return None
    path, rest = test.split("::", 1)
    if _inside(root, path):
        return test
    # JUnit from pytest: classname ``pkg.test_mod.TestCls``, name ``test_x[param]``
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        candidate = "/".join(parts[:cut]) + ".py"
        if _inside(root, candidate):
            return "::".join([candidate, *parts[cut:], rest])
    return None


def _inside(root: Path, rel: str) -> bool:
    """A test file the host may name to the runner: a relative name, a file whose target is in ``root``."""
    return relative_name(rel) and (root / rel).is_file() and inside(root, rel, resolve=True)


def failing_ids(result: GateResult, root: Path, *, node_ids: bool) -> list[str]:
    """The failing tests a gate run names, at most ``MAX_TESTS``.

    The gate runner parsed them (its JUnit file, else its log: pytest summary lines, TAP, jest, ...).
    ``node_ids``: only runnable pytest node ids; otherwise the ids as they are.
    """
    parsed = [f.test for f in result.failures if f.test]
    ids = pytest_node_ids(parsed, root) if node_ids else list(dict.fromkeys(parsed))
    return ids[:MAX_TESTS]


def still_failing(result: GateResult, root: Path, *, node_ids: bool) -> bool:
    """A fast run that settles the round: it failed naming failing tests (``node_ids``: pytest node ids of
    files in ``root``; anything else, such as a coverage threshold's ``FAIL`` line, names none), or timed out."""
    return not result.passed and (result.timed_out or bool(failing_ids(result, root, node_ids=node_ids)))


@dataclass(frozen=True)
class FastRerun:
    """One gate's fast rerun, planned from a failed full run of it.

    ``template``: the gate's ``fast`` or a derived pytest template (``{tests}``); else ``rerunner`` builds the
    command for another runner. ``dropped``: options of the gate's command the derived one leaves out.
    """

    spec: GateSpec
    template: str | None
    tests: tuple[Target, ...]
    node_ids: bool  # a derived pytest command: only node ids whose file still exists
    rerunner: Rerunner | None = None
    dropped: tuple[str, ...] = ()
    thresholds_off: str = ""  # the option that turned coverage thresholds off, said to the model

    def settles(self, result: GateResult, root: Path) -> bool:
        return still_failing(result, root, node_ids=self.node_ids)

    def current_tests(self, root: Path) -> list[Target]:
        """The tests still to rerun: those whose file (or package folder) is still in the worktree."""
        if self.node_ids:
            return [Target(t) for t in pytest_node_ids([t.id for t in self.tests], root)]
        return [t for t in self.tests if not t.place or _exists(root, t.place)]

    def command(self, tests: Sequence[Target]) -> str | None:
        if self.template is not None:
            return render(self.template, [t.id for t in tests])
        return self.rerunner.command(tests) if self.rerunner else None

    def note(self) -> str:
        """What the model is told about this rerun's command beyond the command itself."""
        notes = [f"The fast rerun of gate {self.spec.name} left out {', '.join(self.dropped)} (they select or stop "
                 "tests, or measure the whole suite); the full gate keeps them."] if self.dropped else []
        if self.thresholds_off:
            notes.append(coverage_off.note(self.spec.name, self.thresholds_off))
        return " ".join(notes)

    async def run(self, tests: list[Target], *, cwd: Path, env: dict[str, str], log_dir: Path,
                  launcher: Sequence[str], limits: Limits) -> GateResult:
        """Runs as ``<name>.fast`` (its log is ``<name>.fast.log``, the full run's log stays)."""
        command = self.command(tests) or self.spec.command
        spec = self.spec.model_copy(update={"name": f"{self.spec.name}.fast", "command": command})
        return await run_gate(spec, cwd=cwd, env=env, log_dir=log_dir, launcher=launcher, limits=limits)


def _exists(root: Path, rel: str) -> bool:
    """Only a name handed to the sandboxed runner: checked as written (the host reads nothing there)."""
    return relative_name(rel) and (root / rel).exists()


def plan_rerun(spec: GateSpec, result: GateResult, root: Path) -> FastRerun | None:
    """The fast rerun for a gate's next round, if its full run failed on named tests it can rerun."""
    if result.passed or result.timed_out:
        return None
    if spec.fast is not None:
        tests = failing_ids(result, root, node_ids=False)
        return FastRerun(spec, spec.fast, tuple(Target(t) for t in tests), False) if tests else None
    if derived := pytest_fast(spec.command):
        tests = failing_ids(result, root, node_ids=True)
        if not tests:
            return None
        template, dropped = derived
        off = coverage_off.PYTEST if coverage_off.pytest_threshold(result.log_path, dropped) else ""
        if off:
            template = f"{template.removesuffix('{tests}')}{off} {{tests}}"
        return FastRerun(spec, template, tuple(Target(t) for t in tests), True, None, tuple(dropped), off)
    rerunner = derive_rerunner(spec.command, root)
    if rerunner is None:
        return None
    targets = tuple(rerunner.targets(result.failures)[:MAX_TESTS])
    if not targets or rerunner.command(targets) is None:
        return None
    return FastRerun(spec, None, targets, False, rerunner, rerunner.dropped, rerunner.coverage_off)
