"""The host paths the sandbox hides, keeps and stages: what it masks and hides (credentials, host services'
sockets), what it still needs from under them, where the interpreter lives, and what an unprivileged uid cannot
reach where it is (``sandbox.py`` builds the bwrap command from these)."""

from __future__ import annotations

import os
import pwd
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

# Host places that commonly hold credentials: hidden even though the rest of the host is readable.
MASKED = ("/run/secrets", "/var/run/secrets")
# Where host services keep their sockets: connect() works through a read-only mount, and docker, systemd and
# D-Bus trust a peer by its uid, which for a sandbox started by root is root on the host.
HIDDEN = ("/run", "/var/run")


def hidden_prefixes() -> tuple[str, ...]:
    return tuple(p.rstrip("/") + "/" for p in {*HIDDEN, *real_paths(p for p in HIDDEN if os.path.isdir(p))})


def hides(path: str) -> bool:
    """Whether the sandbox keeps ``path`` hidden even when a command names it: host sockets and /run."""
    real = os.path.realpath(path)
    prefixes = hidden_prefixes()
    return (path + "/").startswith(prefixes) or (real + "/").startswith(prefixes) or stat.S_ISSOCK(
        os.stat(real).st_mode)


def kept_from_hidden() -> list[tuple[str, str]]:
    """What the sandbox still needs from under /run, read-only: the resolver configuration /etc/resolv.conf
    points to (systemd-resolved) and the directories on PATH (NixOS)."""
    prefixes = hidden_prefixes()
    kept: list[tuple[str, str]] = []
    resolv = os.path.realpath("/etc/resolv.conf")
    if resolv.startswith(prefixes) and os.path.isfile(resolv):
        kept.append((resolv, resolv))
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        real = os.path.realpath(entry) if entry.startswith("/") else ""
        if (entry.startswith(prefixes) or real.startswith(prefixes)) and os.path.isdir(real):
            kept += [(real, entry)] + ([(real, real)] if real != entry and real.startswith(prefixes) else [])
    return kept


def homes() -> list[str]:
    """The homes the sandbox hides: $HOME and the account's own (a child's host runs with the run's scratch home as
    $HOME). A home that does not exist, like nobody's /nonexistent, has nothing to hide and no mount point."""
    return [h for h in real_paths({os.path.expanduser("~"), account_home()} - {"/", ""}) if os.path.isdir(h)]


def account_home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return ""


def interpreter_dirs() -> list[str]:
    """Where the interpreter and its packages live (mapped back if the home directory hides them)."""
    import prime_ci

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
            str(Path(prime_ci.__file__).resolve().parents[1])}
    # only package directories from sys.path: an entry like the current directory or /tmp would undo the
    # private /tmp and the hidden home
    dirs.update(p for p in sys.path if "-packages" in p)
    return real_paths(d for d in dirs if os.path.isdir(d))


def real_paths(paths: Iterable[str]) -> list[str]:
    """Resolved, de-duplicated, parents before children (a later bind must not hide an earlier one's child)."""
    return sorted({os.path.realpath(p) for p in paths})
