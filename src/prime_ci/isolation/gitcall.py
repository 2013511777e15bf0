"""The one way the host runs git: no call runs a program a repository names.

A repository's own configuration (REPO's ``.git/config`` and what it includes, or the clone's config, which the
kernel can write with ``--sandbox off``) can name programs git starts by itself: filter and process filters
(``filter.<name>.*``), fsmonitor, hooks, signing programs, credential helpers, editors, pagers, transport
commands. Every call therefore passes fixed overrides for the keys with fixed names (``HARDENING``) and, read
from the configuration the call will see (``git config --list`` in the same place, which runs nothing), an
override for every filter driver and signing program named there. Those go through ``GIT_CONFIG_COUNT``
because ``-c`` splits at the first ``=``, which a driver name may contain. Keys whose first value wins cannot be
overridden that way: ``core.gitProxy`` yields to ``GIT_PROXY_COMMAND``, a remote's ``uploadpack``/``receivepack``
to the command-line option. Textconv and external diff drivers cannot be switched off by a value: every diff
passes ``--no-ext-diff --no-textconv``. Submodules are never entered (``--ignore-submodules=dirty`` on status
and diff): their own configuration is not read here.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from prime_ci.errors import PersistenceError

HARDENING = (
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "protocol.ext.allow=never",
    "-c", "core.sshCommand=false",
    "-c", "core.askPass=",
    "-c", "core.editor=false",
    "-c", "sequence.editor=false",
    "-c", "core.alternateRefsCommand=true",
    "-c", "diff.external=",
    "-c", "core.pager=cat",
    "-c", "credential.helper=",
    "-c", "commit.gpgSign=false",
    "-c", "tag.gpgSign=false",
    "-c", "push.gpgSign=false",
    "-c", "gpg.program=false",
    "-c", "gpg.openpgp.program=false",
    "-c", "gpg.x509.program=false",
    "-c", "gpg.ssh.program=false",
    "-c", "submodule.recurse=false",
    "-c", "push.recurseSubmodules=no",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    "-c", "safe.directory=*",
)

IDENTITY = ("-c", "user.name=prime-ci", "-c", "user.email=prime-ci@localhost", "-c", "commit.gpgsign=false")

# remote.<name>.uploadpack/receivepack: the first value wins over a -c, so the option is given on the command line
_TRANSPORT = {"push": "--receive-pack=git-receive-pack", "fetch": "--upload-pack=git-upload-pack",
              "pull": "--upload-pack=git-upload-pack", "ls-remote": "--upload-pack=git-upload-pack",
              "clone": "--upload-pack=git-upload-pack"}

# keys under a name the configuration chooses, and the value that makes each run nothing of the repository's
_NAMED = re.compile(r"^(filter|gpg)\.(.+)\.([a-z0-9-]+)$", re.S)
_NEUTRAL = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "gpg": (("program", "false"),),
}


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "GIT_ASKPASS", "SSH_AUTH_SOCK")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        GIT_OPTIONAL_LOCKS="0",
        GIT_PROXY_COMMAND="",  # before core.gitProxy, whose first value wins over a -c
    )
    env.update(extra or {})
    return env


class GitError(RuntimeError):
    pass


class GitDiskFull(GitError, PersistenceError):
    """git could not write (its index, an object, a lock) because the disk is full: a ``PersistenceError`` (exit 6)
    wherever it is not handled as a failed git call (the run's stop), as every other full-disk write is."""


# How git says a write failed for want of space: strerror of ENOSPC, EDQUOT and EFBIG, and its own wording in
# csum-file.c ("sha1 file '...' write error. Out of diskspace").
_DISK_FULL = re.compile(r"No space left on device|Out of diskspace|Disk quota exceeded|File too large")


def git_reason(stderr: bytes) -> str:
    """git's own reason, whole: its ``fatal:``/``error:`` lines first (the advice after them, such as the
    safe.directory hint for a repository owned by another user, is kept after them)."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    first = [line for line in lines if line.startswith(("fatal:", "error:"))]
    rest = [line for line in lines if line not in first and not line.startswith("hint:")]
    return " ".join([*first, *rest])[:600]


def neutral_overrides(names: Sequence[str]) -> list[tuple[str, str]]:
    """For config keys (as ``git config --list --name-only`` prints them), the (key, value) pairs that switch
    off every filter driver and signing program they name."""
    pairs: dict[str, str] = {}
    for key in names:
        if (m := _NAMED.match(key)) and m.group(1) in _NEUTRAL:
            section, name = m.group(1), m.group(2)
            for variable, value in _NEUTRAL[section]:
                pairs[f"{section}.{name}.{variable}"] = value
    return sorted(pairs.items())


def config_env(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


def _with_transport(args: Sequence[str]) -> list[str]:
    """``args`` with the transport program pinned after the subcommand (global ``-c`` pairs may come first)."""
    out, i = list(args), 0
    while i < len(out) and out[i] == "-c":
        i += 2
    if i < len(out) and out[i] in _TRANSPORT:
        out.insert(i + 1, _TRANSPORT[out[i]])
    return out


def git(
    args: Sequence[str],
    *,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run one hardened git command and return the completed process (bytes). The configuration the command
    will read is listed first, in the same place; when it cannot be read, the command is not run."""
    args = _with_transport(args)
    base = ["git", *HARDENING]
    if git_dir is not None:
        base.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        base.append(f"--work-tree={work_tree}")
    listing = subprocess.run([*base, "config", "--list", "--name-only", "-z"], cwd=cwd, env=git_env(env),
                             capture_output=True, check=False, timeout=60)
    if listing.returncode == 0:
        keys = listing.stdout.decode(errors="surrogateescape").split("\0")
        run_env = git_env({**(env or {}), **config_env(neutral_overrides([k for k in keys if k]))})
        proc = subprocess.run([*base, *args], cwd=cwd, env=run_env, input=input, capture_output=True, check=False,
                              timeout=600)
    else:
        proc = subprocess.CompletedProcess([*base, *args], listing.returncode, b"", listing.stderr)
    if check and proc.returncode != 0:
        reason = git_reason(proc.stderr)
        if _DISK_FULL.search(reason):
            raise GitDiskFull(f"git {' '.join(args)} failed (disk full): {reason}")
        raise GitError(f"git {' '.join(args)} failed: {reason or proc.returncode}")
    return proc


def git_text(args: Sequence[str], **kw: object) -> str:
    return git(args, **kw).stdout.decode(errors="replace").strip()  # type: ignore[arg-type]
