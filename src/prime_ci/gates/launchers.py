"""What a Python test command runs: the launcher words in front of the runner, read once for every fast rerun.

``uv run`` (``poetry run``, ``pdm run``), then the interpreter and its flags (``python -X dev -Wd``) or ``coverage
run`` and its own options (``python -m coverage run`` too), then ``-m MODULE`` or a script; else an executable
(``pytest``, ``django-admin``). The words after it are the runner's own, read by :mod:`prime_ci.gates.fast_rerun`
(pytest) and :mod:`prime_ci.gates.rerun_commands` (unittest, Django, ``setup.py test``). The launcher words are
kept as written in the narrowed command: ``coverage run`` keeps measuring, and checks no threshold itself (that is
``coverage report --fail-under``, a command of its own).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SHELL_SPECIAL = set("$`;&|<>(){}[]*?!#~\\\n\r")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
PYTHON = re.compile(r"^python[0-9.]*$")
COVERAGE = re.compile(r"^coverage[0-9.-]*$")

_PYTHON_FLAGS = {"-u", "-B", "-E", "-s", "-S", "-I", "-P", "-O", "-OO", "-b", "-bb", "-q"}
_PYTHON_VALUE_FLAGS = ("-X", "-W")  # the value as the next word, or joined: -Wd, -Xdev
_UV_FLAGS = {"--frozen", "--locked", "--no-sync", "--offline", "--isolated", "--all-extras", "--no-dev", "-q",
             "--quiet"}
_UV_VALUE_FLAGS = {"--extra", "--group", "--with", "--python", "--package"}
# ``coverage run``'s options (optparse: the value after ``=`` or as the next word), up to the program.
_COVERAGE_FLAGS = {"-a", "--append", "--branch", "-L", "--pylib", "-p", "--parallel-mode", "--timid"}
_COVERAGE_VALUE = {"--concurrency", "--context", "--data-file", "--include", "--omit", "--source", "--save-signal",
                   "--debug", "--rcfile"}


@dataclass(frozen=True)
class Entry:
    """What a command line runs: ``name`` is the module (``module``: run with ``-m``) or the script's or
    executable's file name; its own arguments start at word ``args``."""

    name: str
    module: bool
    args: int


def split_assignments(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """The command's leading ``NAME=value`` words (shell-quoted again) and the words after them."""
    env: list[str] = []
    rest = list(words)
    while rest and (assignment := ASSIGNMENT.match(rest[0])):
        env.append(f"{assignment[1]}={shlex.quote(assignment[2])}")
        rest = rest[1:]
    return env, rest


def entry(words: Sequence[str]) -> Entry | None:
    """What ``words`` (without leading assignments) run; None when a launcher option is not read for sure."""
    i = _tool_run(words)
    if i is None or i >= len(words):
        return None
    first = Path(words[i]).name
    if PYTHON.match(first):
        return _python(words, i + 1)
    if COVERAGE.match(first) and words[i + 1 : i + 2] == ["run"]:
        return _coverage_run(words, i + 2)
    return Entry(first, False, i + 1)


def _tool_run(words: Sequence[str]) -> int | None:
    """How many words ``uv run [options]`` (``poetry run``, ``pdm run``) take; 0 without one."""
    if not (words and Path(words[0]).name in ("uv", "poetry", "pdm") and words[1:2] == ["run"]):
        return 0
    tool, i = Path(words[0]).name, 2
    while i < len(words) and words[i].startswith("-"):
        if tool != "uv":
            return None
        if words[i] in _UV_FLAGS:
            i += 1
        elif words[i] in _UV_VALUE_FLAGS and i + 1 < len(words):
            i += 2
        elif words[i].split("=", 1)[0] in _UV_VALUE_FLAGS and "=" in words[i]:
            i += 1
        else:
            return None
    return i


def _python(words: Sequence[str], i: int) -> Entry | None:
    """The interpreter's flags from word ``i``, then ``-m MODULE`` or a script."""
    while i < len(words):
        word = words[i]
        if word in _PYTHON_FLAGS:
            i += 1
        elif word in _PYTHON_VALUE_FLAGS:
            if i + 1 >= len(words):
                return None
            i += 2
        elif word[:2] in _PYTHON_VALUE_FLAGS:
            i += 1
        elif word == "-m":
            if i + 1 >= len(words):
                return None
            if words[i + 1] == "coverage" and words[i + 2 : i + 3] == ["run"]:
                return _coverage_run(words, i + 3)
            return Entry(words[i + 1], True, i + 2)
        elif word.startswith("-"):
            return None  # -c, -, a flag this does not know
        else:
            return Entry(Path(word).name, False, i + 1)
    return None


def _coverage_run(words: Sequence[str], i: int) -> Entry | None:
    """``coverage run``'s options from word ``i``, then the program: a module with ``-m``, else a script."""
    module = False
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if word in ("-m", "--module"):
            module = True
            i += 1
        elif word in _COVERAGE_FLAGS:
            i += 1
        elif word.split("=", 1)[0] in _COVERAGE_VALUE:
            i += 1 if "=" in word else 2
        elif word == "--":
            i += 1
            break
        else:
            return None
    if i >= len(words):
        return None
    return Entry(words[i] if module else Path(words[i]).name, module, i + 1)
