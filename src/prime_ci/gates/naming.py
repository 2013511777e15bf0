"""Gate and setup names from their commands: the test tool a command line runs (``pytest``, ``npm-test``,
``django``), not the wrappers, variable assignments and launchers around it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

# Words that run the next command: their options (those taking a value listed), then the command.
_WRAPPERS: dict[str, set[str]] = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}, "time": {"-f", "--format", "-o", "--output"},
    "nice": {"-n", "--adjustment"}, "timeout": {"-s", "--signal", "-k", "--kill-after"}, "exec": {"-a"},
    "command": set(), "nohup": set(), "stdbuf": set(), "corepack": set(),
    "xvfb-run": {"-s", "--server-args", "-n", "--server-num", "-e", "--error-file", "-f", "--auth-file", "-w", "--wait",
                 "-p"},
}
_RUNNERS = {"uv": "run", "poetry": "run", "pipx": "run", "hatch": "run", "pdm": "run", "rye": "run", "coverage": "run"}
_PACKAGE_MANAGERS = {"npm", "yarn", "pnpm", "bun"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _after_options(words: list[str], valued: set[str]) -> list[str]:
    """``words`` from the first that is not an option (``valued`` ones with their value), past a ``--``."""
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            return words[i + 1:]
        i += 2 if words[i] in valued else 1
    return words[i:]


def _python_tool(first: str, rest: list[str]) -> str:
    """``python [options] -m MODULE ...`` runs MODULE, ``python [options] SCRIPT`` the script."""
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "-m" and i + 1 < len(rest):
            return _tool(rest[i + 1:])
        if word.startswith("-m") and len(word) > 2:
            return _tool([word[2:], *rest[i + 1:]])
        if word in ("-c", "-"):
            break
        if not word.startswith("-"):
            return Path(word).name
        i += 2 if word in ("-W", "-X") else 1
    return first


def _tool(words: list[str]) -> str:
    """The test tool a command line runs, past wrappers, variable assignments and launchers."""
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return ""
    first, rest = Path(words[0]).name, words[1:]
    if first in _WRAPPERS:
        rest = _after_options(rest, _WRAPPERS[first])
        if first == "timeout" and rest:
            rest = rest[1:]  # the duration
        return _tool(rest)
    if re.match(r"^python[0-9.]*$", first):
        return _python_tool(first, rest)
    if _RUNNERS.get(first) and rest[:1] == [_RUNNERS[first]]:
        rest = _after_options(rest[1:], set())
        return _tool(rest) if rest else first
    if first in ("npx", "pnpx", "bunx"):
        return _tool(_after_options(rest, {"-p", "--package"})) or first
    if first in _PACKAGE_MANAGERS and rest:
        if rest[0] in ("exec", "dlx", "x"):
            return _tool(_after_options(rest[1:], set())) or first
        task = rest[1] if rest[0] == "run" and len(rest) > 1 else rest[0]
        return f"{first}-{task}"
    if first in ("tox", "nox"):
        envs = [rest[i + 1] for i, w in enumerate(rest[:-1]) if w in ("-e", "-s", "--session", "--sessions")]
        return f"{first}-{envs[0]}" if envs else first
    return first


def command_word(command: str) -> str:
    """What a gate or setup command is named after (``env -u X npm test``: ``npm-test``)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return _tool(words)
