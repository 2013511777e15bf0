"""Tools on the job's PATH that live under the home the sandbox hides (pipx's and ``uv tool``'s ``~/.local/bin``,
a pyenv interpreter): what the sandbox shows of them, read-only, so that a gate, setup or build command can run
them, and nothing else of the home (``~/.ssh``, ``~/.config/gh`` and the like stay hidden).

A tool is the file its name resolves to on PATH. It gets: its own file at the place PATH finds it, the virtual
environment it runs from (``pyvenv.cfg`` beside its ``bin``), and that environment's base interpreter, or the
interpreter its ``#!`` line names, with the installation (prefix) around it, when those are under the home too.
A JavaScript tool (pnpm/action-setup's ``~/setup-pnpm/node_modules/.bin/pnpm``, ``npm i -g`` under a home prefix)
is a link into a package that loads its other files relative to its real path, and its dependencies from the
``node_modules`` beside it: it gets that ``node_modules`` tree, and stays a link where PATH finds it.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable
from pathlib import Path

from prime_ci.isolation.host_paths import homes

_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}
_PREFIXES = {"exec", "env", "time", "nice", "command", "sudo", "xargs"}


def program_words(command: str) -> list[str]:
    """The words of a shell command line that name programs: the first of each simple command, past ``VAR=x``
    assignments and wrappers like ``env`` or ``exec``."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []
    found: list[str] = []
    expect = True
    for word in words:
        if word in _SEPARATORS or set(word) <= set("&|;()"):
            expect = True
        elif expect and (("=" in word and not word.startswith("=")) or word in _PREFIXES or word.startswith("-")):
            continue
        elif expect:
            found.append(word)
            expect = False
    return found


def under_homes(path: str, hidden: Iterable[str]) -> bool:
    return any(path == h or path.startswith(h.rstrip("/") + "/") for h in hidden)


def hidden_tools(commands: Iterable[str], search: str | None = None) -> list[str]:
    """The programs ``commands`` run that PATH (``search``, default the job's) finds under a hidden home."""
    search = os.environ.get("PATH", os.defpath) if search is None else search
    hidden = homes()
    found: list[str] = []
    for command in commands:
        for word in program_words(command):
            where = shutil.which(word, path=search) if "/" not in word else word
            if where and os.path.isabs(where) and under_homes(os.path.abspath(where), hidden):
                found.append(os.path.abspath(where))
    return sorted(set(found))


def mounts(tool: str) -> list[tuple[str, str, str]]:
    """The sandbox's mounts for ``tool`` (bwrap's option, its source, its target): the directories it needs, and
    its own file where PATH finds it, bound, or, for a link into a directory it needs (a package's bin under
    ``node_modules``), a link to its real path; nothing more where that place is inside a directory bound whole."""
    real = os.path.realpath(tool)
    dirs = needs(tool)
    own: list[tuple[str, str, str]] = []
    if not under_homes(tool, dirs):
        own = [("--symlink", real, tool) if real != tool and under_homes(real, dirs) else ("--ro-bind", real, tool)]
    return [*own, *(("--ro-bind", d, d) for d in dirs)]


def needs(tool: str) -> list[str]:
    """Besides its own file: the directories ``tool`` runs from that lie under a hidden home (its virtual
    environment, its interpreter's installation, the ``node_modules`` tree of a JavaScript tool)."""
    hidden = homes()
    real = os.path.realpath(tool)
    dirs: list[str] = [tree] if (tree := _package_tree(real)) is not None else []
    venv = _venv_of(real)
    interpreter = _shebang(real)
    if venv is not None:
        dirs.append(venv)
        interpreter = _base_of(venv) or interpreter
    if interpreter is not None:
        real_interp = os.path.realpath(interpreter)
        for candidate in (interpreter, real_interp):
            if (inner := _venv_of(candidate)) is not None and inner not in dirs:
                dirs.append(inner)
                base = _base_of(inner)
                if base is not None:
                    dirs.append(_installation(base))
        dirs.append(_installation(real_interp))
    return sorted({d for d in dirs if os.path.isdir(d) and under_homes(d, hidden)})


def _package_tree(path: str) -> str | None:
    """The outermost ``node_modules`` directory ``path`` lies in: a JavaScript tool's packages and their
    dependencies."""
    parts = Path(path).parts
    return str(Path(*parts[:parts.index("node_modules") + 1])) if "node_modules" in parts[:-1] else None


def _venv_of(path: str) -> str | None:
    root = Path(path).parent.parent
    return str(root) if Path(path).parent.name == "bin" and (root / "pyvenv.cfg").is_file() else None


def _base_of(venv: str) -> str | None:
    """The base interpreter a virtual environment names (``home`` in its pyvenv.cfg): its ``python3``."""
    try:
        lines = (Path(venv) / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return str(Path(value.strip()) / "python3")
    return None


def _installation(interpreter: str) -> str:
    """An interpreter's installation: the directory above its ``bin``, else its own directory."""
    parent = Path(interpreter).parent
    return str(parent.parent if parent.name == "bin" else parent)


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    if not words:
        return None
    first = os.fsdecode(words[0])
    if os.path.basename(first) == "env" and len(words) > 1:
        return shutil.which(os.fsdecode(words[1]))
    return first
