"""Gate and build failures that are not the model's to fix (exit 10, ``environment_error``; DESIGN §14).

Two kinds are recognised from a failed command's own output: it needed the network (the sandbox has none for
gates and builds: tox or ``uvx`` making environments, ``uv run`` without a ``.venv``, a package fetched at test
time), or its program could not run (a tool installed where the sandbox cannot see it). The model is not asked to
fix either; the run stops with one line naming the command, what it printed and how to prepare for it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

# Resolver and routing failures as Python, urllib3/requests, pip, uv (reqwest), node, npm, git and curl print them.
# A refused connection is not among them: a project's own tests talk to servers they start on loopback.
_NETWORK = re.compile(
    r"temporary failure in name resolution|name or service not known|nodename nor servname provided"
    r"|no address associated with hostname|getaddrinfo (?:ENOTFOUND|EAI_AGAIN)|\bEAI_AGAIN\b"
    r"|could not resolve host|failed to lookup address information|dns error"
    r"|network is unreachable|\[errno -[235]\]|\[errno 101\]"
    # the tools' offline switches the gates run with (``engine/toolchains.py``): uv's, and pip's without an index
    r"|network connectivity is disabled|\(from versions: none\)",
    re.IGNORECASE,
)
# A command that could not be started: the shell's own words, or bash's for a script whose interpreter is missing.
_CANNOT_RUN = re.compile(r"(?:command not found|: not found|cannot execute: required file not found"
                         r"|cannot execute: No such file or directory|bad interpreter)")
# A build that cannot import what it builds with (setuptools_scm, Cython): a missing build requirement.
_MISSING_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([A-Za-z0-9_.]+)'")
MAX_QUOTED = 200

# What to do in setup (which has the network) for the tools that reach for it as they run.
_PREPARE = {
    "tox": "run `tox -e ENV --notest -x testenv.package=wheel` in --setup, and gate with `tox -e ENV -x "
           "testenv.package=wheel` (a wheel builds offline in tox's .pkg environment; an sdist fetches its build "
           "requirements)",
    "uv": "run `uv sync --frozen` in --setup, and gate with `uv run --offline …` (or UV_OFFLINE=1)",
    "uvx": "install the tool in --setup (`uv tool install …`), or gate with `uvx --offline …` once it is cached",
    "nox": "run `nox -s SESSION --install-only` in --setup, and gate with `nox -s SESSION -r` (the project "
           "reinstalled offline, its build requirements from the wheelhouse setup fills; `-R` skips installs, for "
           "an editable install)",
    "poetry": "run `poetry install` in --setup, and gate with `poetry run …`",
    "pip": "install what it needs in --setup",
    "npm": "run `npm ci` in --setup",
    "npx": "install the package in --setup (`npm ci`), so npx finds it locally",
}


# The commands nox logs as a session runs them ("nox > pdm install -Gtest"), and those of session.install, which
# `nox --install-only` runs (session.run's it skips)
_NOX_STEP = re.compile(r"^nox > (?!Running session|Session |Reusing|Re-using|Creating|Ran |\* |Command )(.+)$")
_NOX_INSTALL = re.compile(r"^(?:\S*python\S* -m pip install|uv pip install|pip install|conda install|mamba install)\b")


@dataclass(frozen=True)
class EnvironmentFault:
    """Why a command failed for want of its environment, in one line."""

    kind: str  # "network", "cannot run" or "missing module"
    line: str  # what the command printed that says so
    step: str | None = None  # the command a nox session was running then ("nox > CMD"), if it said

    def detail(self, what: str, command: str) -> str:
        quoted = self.line if len(self.line) <= MAX_QUOTED else self.line[:MAX_QUOTED] + "…"
        if self.kind == "missing module":
            return (f"{what} could not import a module it builds with ({quoted!r}): add it to [build-system].requires"
                    " (installed in setup for --build) or install it in --setup")
        if self.kind == "network":
            tool = _tool(command)
            how = _PREPARE.get(tool, "prepare what it fetches in --setup (setup has the network)")
            if tool == "nox" and self.step is not None and not _NOX_INSTALL.match(self.step):
                how = (f"the session's `{self.step}` needed it, and `nox --install-only` does not run it (it runs "
                       f"only session.install): run `{self.step}` in --setup instead, and gate with the session's "
                       "test command through the same tool (`pdm run …`, `poetry run …`)")
            return f"{what} needed the network, which gates and builds do not have ({quoted!r}): {how}"
        return (f"{what} could not start its program ({quoted!r}): install it where the sandbox sees it (the "
                "project's environment, /usr), or name its directory with --sandbox-ro")


def recognise(output: str, exit_code: int | None, *, build: bool = False) -> EnvironmentFault | None:
    """The environment error a failed command's output shows, if any (the last such line). For a build, a module
    it cannot import is one too (a gate's is the model's: its code may import what does not exist)."""
    lines = output.splitlines()
    if build:
        for line in reversed(lines):
            if _MISSING_MODULE.search(line):
                return EnvironmentFault("missing module", line.strip())
    if exit_code in (126, 127):
        for line in reversed(lines):
            if _CANNOT_RUN.search(line):
                return EnvironmentFault("cannot run", line.strip())
    for index in range(len(lines) - 1, -1, -1):
        if _NETWORK.search(lines[index]):
            step = next((m[1].strip() for line in reversed(lines[:index]) if (m := _NOX_STEP.match(line))), None)
            return EnvironmentFault("network", lines[index].strip(), step)
    return None


def recognise_gate(output: str, exit_code: int | None, failing: Sequence[str]) -> EnvironmentFault | None:
    """A failed gate's environment error. When the gate's failing tests are known with what they failed on
    (``failing``: each one's message and text), only that counts: a network error elsewhere in the output did not
    fail the gate (a docs build's warning for an inventory it could not fetch, beside a test the model broke),
    while a test that failed on one needed the network. A "failing test" read from the log with nothing of its own
    (a tool's error line that looks like a runner's mark) is no evidence: the whole output counts."""
    return recognise("\n".join(failing), exit_code) if failing else recognise(output, exit_code)


def _tool(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if "=" not in w or w.startswith("-")]  # VAR=value prefixes
    if words[:2] in (["python", "-m"], ["python3", "-m"]) and len(words) > 2:
        return words[2]
    return words[0].rsplit("/", 1)[-1] if words else ""
