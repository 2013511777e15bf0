"""What model-written code may see: a scrubbed environment (and, with issue 7, a bubblewrap sandbox)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Variables that carry no secrets and that tools commonly need.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SHELL", "USER", "LOGNAME", "PYTHONHASHSEED",
            "CI", "GITHUB_ACTIONS", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH")


def scrubbed_env(home: Path, pass_env: list[str] | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """An allowlisted environment: provider keys and tokens never pass unless named in ``pass_env``."""
    env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
    for name in pass_env or []:
        if name in os.environ:
            env[name] = os.environ[name]
    # The interpreter running prime-ci (and so the kernel) comes first, so `python` in gates matches it.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
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
