"""Fast rerun commands for runners other than pytest: the gate's own command narrowed to the failing tests.

Each runner is read from the gate's command words: the launcher (``python -m unittest``, ``manage.py
test``, ``python -m django test``, ``node --test``, ``npx jest``, ``npx vitest run``, ``go test``, ``cargo test``;
what starts a Python runner, such as ``coverage run``, is read in :mod:`prime_ci.gates.launchers`), then its
options. The runner's options are kept unless they select tests or stop early (those are replaced by the
failing tests, and named in ``dropped``); its positional arguments (paths, packages, modules) give way to the
failing tests' own. Anything this does not read for sure (shell syntax, an unknown option before a plain word, a
runner it does not know) gives no rerun: the gate then runs in full. jest and vitest reruns have coverage
off (:mod:`prime_ci.gates.coverage_off`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prime_ci.gates import coverage_off
from prime_ci.gates.junit import JUnitFailure
from prime_ci.gates.launchers import SHELL_SPECIAL, Entry, entry, split_assignments

_DOTTED = re.compile(r"^[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class Target:
    """One test to rerun: ``id`` as the runner selects it, ``place`` the file or package it lives in."""

    id: str
    place: str = ""


@dataclass(frozen=True)
class _Options:
    value: frozenset[str] = frozenset()  # kept, with the next word as their value
    drop_value: frozenset[str] = frozenset()  # selection or stopping early: dropped with their value
    drop: frozenset[str] = frozenset()  # flags dropped
    flag: frozenset[str] = frozenset()  # flags kept: the next word is not their value


_UNITTEST_FLAGS = frozenset({"-v", "--verbose", "-q", "--quiet", "--locals", "-b", "--buffer", "-c", "--catch"})
_UNITTEST = _Options(value=frozenset({"-k", "-s", "-p", "-t", "--durations"}), drop=frozenset({"-f", "--failfast"}),
                     flag=_UNITTEST_FLAGS)
_DJANGO = _Options(
    value=frozenset({"--settings", "--pythonpath", "--testrunner", "--parallel", "--tag", "--exclude-tag", "-v",
                     "--verbosity", "--durations", "--top-level-directory", "-t", "--pattern", "-p"}),
    drop_value=frozenset({"-k"}), drop=frozenset({"--failfast", "--reverse", "-r", "--shuffle"}),
    flag=frozenset({"--noinput", "--no-input", "--keepdb", "--debug-mode", "-d", "--debug-sql", "--pdb", "-b",
                    "--buffer", "--no-faulthandler", "--timing", "--force-color", "--no-color", "--skip-checks",
                    "--traceback"}),
)
_NODE = _Options(
    value=frozenset({"--test-reporter", "--test-reporter-destination", "--test-concurrency", "--import",
                     "--require", "-r", "--loader", "--experimental-loader", "--test-timeout", "--env-file"}),
    drop_value=frozenset({"--test-name-pattern", "--test-skip-pattern", "--test-shard"}),
    drop=frozenset({"--test-only", "--watch"}),
)
_JEST = _Options(
    value=frozenset({"-c", "--config", "--maxWorkers", "-w", "--reporters", "--testEnvironment", "--rootDir",
                     "--outputFile", "--testTimeout", "--selectProjects", "--setupFiles"}),
    drop_value=frozenset({"-t", "--testNamePattern", "--testPathPattern", "--shard"}),
    drop=frozenset({"--bail", "-b", "--onlyChanged", "-o", "--changedSince", "--watch", "--watchAll", "--coverage",
                    "--onlyFailures", "-f"}),
)
_VITEST = _Options(
    value=frozenset({"-c", "--config", "--root", "-r", "--pool", "--reporter", "--outputFile", "--environment",
                     "--project", "--maxWorkers", "--minWorkers", "--testTimeout", "--mode", "--dir"}),
    drop_value=frozenset({"-t", "--testNamePattern", "--shard", "--bail", "--changed"}),
    drop=frozenset({"--coverage", "--coverage.enabled", "--watch", "-w", "--update", "-u"}),
)
_GO = _Options(
    value=frozenset({"-count", "-timeout", "-tags", "-p", "-parallel", "-cpu", "-mod", "-ldflags", "-gcflags",
                     "-exec", "-shuffle", "-covermode", "-coverpkg", "-vet", "-benchtime"}),
    drop_value=frozenset({"-run", "-skip", "-bench", "-coverprofile", "-o"}),
    drop=frozenset({"-failfast"}),
)
_CARGO = _Options(
    value=frozenset({"-p", "--package", "--features", "-F", "--target", "--profile", "-j", "--jobs",
                     "--manifest-path", "--target-dir", "--test", "--bin", "--example", "--bench"}),
    drop=frozenset({"--no-fail-fast"}),
)
_CARGO_HARNESS = _Options(value=frozenset({"--test-threads", "--format", "-Z", "--color", "--logfile"}),
                          drop=frozenset({"--exact", "--ignored", "--include-ignored"}),
                          drop_value=frozenset({"--skip"}))


@dataclass(frozen=True)
class Rerunner:
    """How one runner's command reruns named tests."""

    runner: str
    prefix: tuple[str, ...]  # the launcher and the kept options, as words
    env: tuple[str, ...] = ()  # the command's leading ``NAME=value`` words, shell-quoted
    dropped: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ()  # words that must stay last (cargo's test-harness options)
    discover: bool = False  # unittest discovery from a start directory: select with -k
    coverage_off: str = ""  # the option that turns coverage thresholds off (see gates/coverage_off.py)

    def targets(self, failures: Sequence[JUnitFailure]) -> list[Target]:
        """The failing tests as this runner selects them (one per test, in order)."""
        out: dict[Target, None] = {}
        for f in failures:
            if target := self._target(f):
                out.setdefault(target, None)
        return list(out)

    def _target(self, f: JUnitFailure) -> Target | None:
        if self.runner in ("unittest", "django", "setup.py"):
            return Target(f.test) if _DOTTED.match(f.test) else None
        if self.runner == "go":
            folder = str(Path(f.file).parent) if f.file else "."
            return Target(f.test.split("/", 1)[0], "." if folder in ("", ".") else folder)
        if self.runner == "cargo":
            return Target(f.test) if f.test and " " not in f.test else None
        if self.runner == "vitest":
            file, _, name = f.test.partition(" > ")
            return Target(name.replace(" > ", " "), f.file or file) if name and (f.file or file) else None
        if self.runner == "jest":
            return Target(f.test.replace(" › ", " "), f.file) if f.file else None
        return Target(f.test, f.file) if f.file else None  # node: a file and the name

    def command(self, targets: Sequence[Target]) -> str | None:
        """The rerun's shell command, or None when this runner cannot take these tests at once."""
        ids = [t.id for t in targets]
        places = list(dict.fromkeys(t.place for t in targets if t.place))
        words: list[str] = list(self.prefix)
        if self.runner in ("unittest", "django"):
            words += [w for i in ids for w in ("-k", i)] if self.discover else ids
        elif self.runner == "setup.py":
            if len(ids) != 1:
                return None
            words += ["-s", ids[0]]
        elif self.runner == "node":
            # node 20 matches each test's own name, later versions also the names joined with their suites'
            names = [n for i in ids for n in (i.rsplit(" > ", 1)[-1], i.replace(" > ", " "))]
            words += [f"--test-name-pattern={_alternation(names)}", *places]
        elif self.runner in ("jest", "vitest"):
            words += [*places, "-t", _alternation(ids), *filter(None, [self.coverage_off])]
        elif self.runner == "go":
            words += [p if p.startswith(".") else f"./{p}" for p in places]
            words += ["-run", _alternation(ids)]
        elif self.runner == "cargo":
            words += ["--", *self.suffix, "--exact", *ids]
        return " ".join([*self.env, shlex.join(words)])


def _alternation(names: Sequence[str]) -> str:
    unique = list(dict.fromkeys(names))
    return "^(?:" + "|".join(re.escape(n).replace("\\ ", " ") for n in unique) + ")$"


def derive_rerunner(command: str, root: Path | None = None) -> Rerunner | None:
    """The rerunner for a gate command of a known runner, None when this cannot be sure of it.

    ``root``: the worktree, where ``npm test`` (pnpm, yarn; ``run NAME`` too) finds its script in
    package.json: a plain jest, vitest or ``node --test`` command is narrowed by arguments after it."""
    if SHELL_SPECIAL & set(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    env, words = split_assignments(words)
    found = _launcher(words)
    if found is None:
        return _script(words, env, root) if root is not None else None
    runner, start = found
    options = {"unittest": _UNITTEST, "django": _DJANGO, "setup.py": _OPTIONS_NONE, "node": _NODE, "jest": _JEST,
               "vitest": _VITEST, "go": _GO, "cargo": _CARGO}[runner]
    rest = words[start:]
    harness: list[str] = []
    if runner == "cargo" and "--" in rest:
        rest, harness = rest[: rest.index("--")], rest[rest.index("--") + 1 :]
    discover = runner == "unittest" and rest[:1] == ["discover"]
    if discover:
        rest = rest[1:]
    read = _read_options(rest, options)
    if read is None:
        return None
    kept, dropped, positionals = read
    suffix: list[str] = []
    if harness:
        harness_read = _read_options(harness, _CARGO_HARNESS)
        if harness_read is None:
            return None
        suffix, more, filters = harness_read
        dropped += more + filters
    if discover:
        kept = ["discover", *kept, *_discover_positionals(positionals)]
    launcher = words[:start]
    if runner == "node" and "--test" not in launcher:
        return None
    return Rerunner(runner, tuple(launcher + kept), tuple(env), tuple(dropped), tuple(suffix), discover,
                    _COVERAGE_OFF.get(runner, ""))


_OPTIONS_NONE = _Options()
_COVERAGE_OFF = {"jest": coverage_off.JEST, "vitest": coverage_off.VITEST}
_PACKAGE_JSON_LIMIT = 1 << 20


def _script(words: list[str], env: list[str], root: Path) -> Rerunner | None:
    """``npm test`` and the like, when the script is a command this narrows: its arguments go after it."""
    tool = Path(words[0]).name if words else ""
    rest = words[1:]
    if tool not in ("npm", "pnpm", "yarn") or not rest:
        return None
    if rest[0] in ("run", "run-script") and len(rest) == 2:
        name = rest[1]
    elif len(rest) == 1 and (rest[0] == "test" or tool == "yarn"):
        name = rest[0]
    else:
        return None
    try:
        path = root / "package.json"
        if path.stat().st_size > _PACKAGE_JSON_LIMIT:
            return None
        scripts = json.loads(path.read_text(encoding="utf-8")).get("scripts")
    except (OSError, ValueError, AttributeError):
        return None
    script = scripts.get(name) if isinstance(scripts, dict) else None
    inner = derive_rerunner(script) if isinstance(script, str) else None
    if inner is None or inner.runner not in ("jest", "vitest", "node"):
        return None
    prefix = (*words, "--") if tool == "npm" else tuple(words)  # npm passes what follows -- to the script
    # the script keeps its own options: vitest refuses a second --coverage.enabled
    off = "" if any(d.startswith("--coverage.enabled") for d in inner.dropped) else inner.coverage_off
    return Rerunner(inner.runner, prefix, tuple(env), coverage_off=off)


def _discover_positionals(positionals: list[str]) -> list[str]:
    """``discover [start [pattern [top]]]`` given positionally: kept as options."""
    names = ["-s", "-p", "-t"]
    return [w for name, value in zip(names, positionals, strict=False) for w in (name, value)]


def _launcher(words: list[str]) -> tuple[str, int] | None:
    """The runner and how many words start it."""
    if not words:
        return None
    found = entry(words)
    if found is not None and (python := _python_runner(found, words)):
        return python
    first = Path(words[0]).name
    if first == "node":
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 1
        return ("node", i) if "--test" in words[1:i] else None
    if first in ("go", "cargo") and words[1:2] == ["test"]:
        return first, 2
    i = 0
    if first in ("npx", "pnpm", "yarn", "bunx") or (first == "npm" and words[1:2] == ["exec"]):
        i = 1
        while i < len(words) and words[i] in ("exec", "--no-install", "--offline", "--"):
            i += 1
    name = Path(words[i]).name if i < len(words) else ""
    if name == "jest":
        return "jest", i + 1
    if name == "vitest":
        if words[i + 1 : i + 2] == ["run"]:
            return "vitest", i + 2
        # without a terminal (a gate's stdin is /dev/null) vitest runs once; its other subcommands do not test
        following = words[i + 1 : i + 2]
        return ("vitest", i + 1) if not following or following[0].startswith("-") else None
    return None


def _python_runner(found: Entry, words: list[str]) -> tuple[str, int] | None:
    """unittest, Django or ``setup.py test`` behind any launcher (``python -m``, ``coverage run``, ``uv run``)."""
    i = found.args
    if found.module:
        if found.name == "unittest":
            return "unittest", i
        return ("django", i + 1) if found.name == "django" and words[i : i + 1] == ["test"] else None
    if found.name in ("manage.py", "django-admin") and words[i : i + 1] == ["test"]:
        return "django", i + 1
    if found.name == "setup.py" and words[i:] == ["test"]:
        return "setup.py", i + 1
    return None


def _read_options(args: list[str], options: _Options) -> tuple[list[str], list[str], list[str]] | None:
    """``(kept, dropped, positionals)``; None when a word cannot be told apart (option value or positional?)."""
    kept: list[str] = []
    dropped: list[str] = []
    positionals: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if not word.startswith("-") or word == "-":
            positionals.append(word)
            i += 1
            continue
        name, inline = word.split("=", 1)[0], "=" in word
        if name in options.value:
            if inline:
                kept.append(word)
            elif nxt is None:
                return None
            else:
                kept += [word, nxt]
                i += 1
        elif name in options.drop_value:
            dropped.append(word if inline or nxt is None else f"{word} {nxt}")
            i += 0 if inline or nxt is None else 1
        elif name in options.drop:
            dropped.append(word)
        elif name in options.flag or inline or nxt is None or nxt.startswith("-"):
            kept.append(word)  # a flag, or an option given as --name=value
        else:
            return None
        i += 1
    return kept, dropped, positionals
