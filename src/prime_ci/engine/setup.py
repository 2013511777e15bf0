"""The setup phase: trusted commands that prepare the worktree before the model's first turn.

Setup commands come from the operator (``--setup``) or from the same sources as the gates (``[[setup]]``
tables in gate files, read at ``--gates-from`` when given, and in ``prime-ci.toml`` as checked out at the base
commit), never from files the model wrote. They run like gates (own process group, full log, timeout, the
gates' scrubbed environment), inside the sandbox when it is on. The network is on unless a table says
``network = false``, except for setup the repository under review wrote (``prime-ci.toml``, a gate file read
from the worktree): that never has network (DESIGN §13). The first failing command ends the run with
``setup_failed`` (exit 9) before any model call.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prime_ci.durations import format_duration
from prime_ci.errors import ConfigError
from prime_ci.gates.junit import ended
from prime_ci.gates.specs import GateSpec, SetupEntry, gates_from_commands
from prime_ci.isolation.parse import toml_loads
from prime_ci.isolation.redact import redact
from prime_ci.isolation.untrusted import clean_terminal_text
from prime_ci.isolation.worktree import read_file_at

DEFAULT_TIMEOUT = 900.0
TAIL_LINES = 15
# what a failed install prints when the network, a proxy or a certificate is the problem (pip, uv, npm, pnpm,
# yarn, curl, git)
_NETWORK = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SELF_SIGNED_CERT|UNABLE_TO_(GET|VERIFY)_\w*ISSUER|"
    r"unable to get local issuer|SSLError|SSL certificate problem|invalid peer certificate|UnknownIssuer|"
    r"ProxyError|proxy error|Proxy Authentication|tunnel connection failed|"
    # whole words: the pattern ignores case, and "ModuleNotFoundError" holds "eNotFound"
    r"\b(?:ECONNREFUSED|ECONNRESET|ENOTFOUND|ETIMEDOUT|EAI_AGAIN|ENETUNREACH)\b|"
    r"Name or service not known|Temporary failure in name resolution|Could not resolve host|Connection refused|"
    r"Network is unreachable|NewConnectionError|ConnectTimeout|error sending request|Failed to fetch|"
    r"No matching distribution found|dns error", re.IGNORECASE)
_BUILD = re.compile(
    r"build backend|BackendUnavailable|Getting requirements to build|metadata-generation-failed|"
    r"Preparing (editable )?metadata|invalid pyproject\.toml|Failed building (editable|wheel)|"
    r"Failed to build|subprocess-exited-with-error|node-gyp|gyp ERR", re.IGNORECASE)
NETWORK_HINT = ("it looks like a network, proxy or certificate problem: setup gets the job's CA and proxy "
                "variables (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, PIP_CERT, https_proxy, ...); "
                "pass any other variable it needs with --pass-env NAME")
OFFLINE_HINT = ("setup from the repository (its prime-ci.toml, or a gate file read from the worktree) runs without "
                "network; if it must download (pip install from PyPI, npm ci), the operator gives it network as "
                "--setup CMD (action input `setup`) or as a [[setup]] table in a gate file read with --gates-from REF")
BUILD_HINT = ("the project's build backend failed (the [build-system] requirements or the backend's own "
              "error, in the log): pip and uv build in an isolated environment with those requirements unless "
              "given --no-build-isolation")


class SetupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", max_length=100)
    command: str = Field(min_length=1)
    timeout: float = DEFAULT_TIMEOUT
    env: dict[str, str] = Field(default_factory=dict)
    network: bool = True
    # written by the repository under review (prime-ci.toml, a gate file read from the worktree): never network
    repository: bool = False

    def as_gate(self) -> GateSpec:
        """Setup runs through the gate runner (process group, log, timeout, escapee sweep)."""
        return GateSpec(name=self.name, command=self.command, timeout=self.timeout, env=self.env)


def _validated(table: Any, label: str, index: int) -> SetupSpec:
    """A ``[[setup]]`` table: the gate fields' rules (name, command, duration, env) plus ``network``."""
    where = f"{label}: setup[{index}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a [[setup]] table")
    unknown = sorted(set(table) - (set(SetupSpec.model_fields) - {"repository"}))  # where it came from is ours
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field")
    if not isinstance(table.get("network", True), bool):
        raise ConfigError(f"{where}.network: must be true or false")
    try:
        gate = GateSpec.model_validate({k: v for k, v in table.items() if k != "network"})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        msg = "field required" if err["type"] == "missing" else str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{where}.{field}: {msg}") from None
    return SetupSpec(name=gate.name, command=gate.command, env=gate.env,
                     timeout=gate.timeout if "timeout" in table else DEFAULT_TIMEOUT,
                     **({"network": table["network"]} if "network" in table else {}))


def from_tables(tables: Any, label: str) -> list[SetupSpec]:
    if not isinstance(tables, list):
        raise ConfigError(f"{label}: setup: must be [[setup]] tables")
    return [_validated(t, label, i) for i, t in enumerate(tables)]


def from_gate_texts(texts: list[tuple[str, str]]) -> list[SetupSpec]:
    """``[[setup]]`` tables of gate files, given as (label, text); the gate loader has validated the TOML."""
    specs: list[SetupSpec] = []
    for label, text in texts:
        data = toml_loads(text)
        if "setup" in data:
            specs += from_tables(data["setup"], label)
    return specs


def gate_file_texts(paths: list[Path], git_dir: Path | None = None, ref: str | None = None,
                    names: list[str] | None = None) -> list[tuple[str, str]]:
    if ref is not None and git_dir is not None:
        return [(f"{ref}:{n}", read_file_at(git_dir, ref, n)) for n in names or []]
    return [(str(p), p.read_text(encoding="utf-8")) for p in paths]


def collect(items: list[str | dict[str, Any]], file_specs: list[SetupSpec]) -> list[SetupSpec]:
    """``--setup`` commands (or ``prime-ci.toml``'s ``setup``: commands or tables), then the gate files'
    ``[[setup]]`` tables; names unique."""
    commands = [c for c in items if isinstance(c, str)]
    specs = [SetupSpec(name=g.name, command=g.command) for g in gates_from_commands(commands)]
    specs += from_tables([t for t in items if not isinstance(t, str)], "prime-ci.toml")
    specs += file_specs
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"duplicate setup name(s): {', '.join(dupes)}")
    return specs


def offline(specs: list[SetupSpec], warn: Callable[[str], None]) -> list[SetupSpec]:
    """Setup the repository under review wrote: without network whatever its table says (one warning for a table
    that asks for it), so a pull request cannot reach the host's network or plant what it fetched."""
    out: list[SetupSpec] = []
    for spec in specs:
        if spec.network and "network" in spec.model_fields_set:
            warn(f"repository settings: setup {spec.name!r}: network = true ignored: {OFFLINE_HINT}")
        out.append(spec.model_copy(update={"network": False, "repository": True}))
    return out


SetupOutcome = SetupEntry  # one shape: what the runner returns is what result.json and the log carry


Runner = Callable[[SetupSpec], Awaitable[SetupOutcome]]


async def run_all(specs: list[SetupSpec], runner: Runner, say: Callable[[str], None]) -> list[SetupOutcome]:
    """Run the commands in order; stop at the first failure."""
    outcomes: list[SetupOutcome] = []
    for index, spec in enumerate(specs, start=1):
        say(f"setup {index}/{len(specs)} {spec.name}: {spec.command.strip().splitlines()[0][:100]}")
        started = time.monotonic()
        outcome = await runner(spec)
        outcomes.append(outcome)
        state = "ok" if outcome.passed else f"FAILED ({ended(outcome.exit_code, outcome.timed_out, spec.timeout)})"
        say(f"setup {spec.name}: {state} in {format_duration(time.monotonic() - started)} -> {outcome.log}")
        if not outcome.passed:
            break
    return outcomes


def failure_detail(outcome: SetupOutcome, hint: str | None = None) -> str:
    why = ended(outcome.exit_code, outcome.timed_out, outcome.timeout_s)
    text = f"setup {outcome.name!r} failed ({why}): {outcome.command.strip()[:300]} (log: {outcome.log})"
    return f"{text}; hint: {hint}" if hint else text


def last_lines(output: str, count: int = TAIL_LINES) -> list[str]:
    """The last non-blank lines of a command's output, redacted and cleaned for a terminal."""
    lines = [line.rstrip() for line in clean_terminal_text(redact(output)).splitlines() if line.strip()]
    return [line[:300] for line in lines[-count:]]


def failure_hint(output: str, offline_repository: bool = False) -> str | None:
    """What a failed setup's output suggests: the network settings (``--pass-env``) or the build backend; for
    the repository's own setup that ran without network, how the operator gives it network."""
    build = BUILD_HINT if _BUILD.search(output) and not _NETWORK.search(output) else None
    if offline_repository:
        return f"{OFFLINE_HINT}; {build}" if build else OFFLINE_HINT
    if _NETWORK.search(output):
        return NETWORK_HINT
    return build
