"""The workflow commands a GitHub Actions runner would read in a step's output, read more eagerly than it does.

The runner (actions/runner: ``ActionCommand.TryParseV2`` and ``TryParse``, ``ActionCommandManager``) reads each line
a step prints, split at LF, CR and CRLF: ``::name props::data`` when the line starts with ``::`` after leading
whitespace, else ``##[name props]data`` anywhere in it; after ``::stop-commands::TOKEN`` it obeys nothing until a
line that is the command ``TOKEN``. This reader finds more: it also splits at every other line break (VT, FF,
FS/GS/RS, NEL, U+2028, U+2029) and at ``%0A``/``%0D`` (what a command's message decodes to), drops format and
control characters first (a culture-aware comparison may skip them), looks for ``##[`` in every line, and takes
any name, registered or not. A command found anywhere but at the start of a line the runner reads is never one
prime-ci wrote.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

OWN = frozenset({"group", "endgroup", "error", "notice", "stop-commands"})  # what prime-ci writes, whole lines
_LINES = re.compile(r"\r\n|\r|\n")
_OTHER_BREAKS = re.compile(r"[\x0b\x0c\x1c-\x1e\x85\u2028\u2029]|%0[AaDd]")
_FILLERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")


@dataclass(frozen=True)
class Command:
    name: str
    line: str  # the line (as the runner splits them) it was found in
    whole: bool  # the runner's own reading of that line, at its start


def _skippable(c: str) -> bool:
    return unicodedata.category(c) in ("Cf", "Cc") or c in _FILLERS or "\ufe00" <= c <= "\ufe0f"


def v2_name(line: str) -> str | None:
    """The command a line holds in the ``::name::`` form (the runner's ``TryParseV2``, any name)."""
    s = line.lstrip()
    if not s.startswith("::"):
        return None
    end = s.find("::", 2)
    return (s[2:end].split(" ", 1)[0] or None) if end >= 0 else None


def v1_names(line: str) -> list[str]:
    """Every command in the ``##[name]`` form anywhere in a line (the runner's ``TryParse`` reads the first)."""
    names = []
    for m in re.finditer(re.escape("##["), line):
        close = line.find("]", m.end())
        if close >= 0 and (name := line[m.end():close].split(" ", 1)[0]):
            names.append(name)
    return names


def commands(output: str) -> list[Command]:
    """Every command in one stream's ``output`` as this reader finds them; a stop-commands block is honoured only as
    the runner honours it (the resume line, at a line start, names the token)."""
    found: list[Command] = []
    token: str | None = None
    for line in _LINES.split(output):
        exact = v2_name(line)
        if token is not None:
            if (exact or "").lower() == token.lower() or token.lower() in (n.lower() for n in v1_names(line)):
                found.append(Command(token, line, exact is not None))
                token = None
            continue
        if exact is not None:
            found.append(Command(exact, line, True))
            if exact == "stop-commands":
                token = line.lstrip()[len("::stop-commands::"):]
        for i, piece in enumerate(pieces(line)):
            name = v2_name(piece)
            if name is not None and not (i == 0 and name == exact):
                found.append(Command(name, line, False))
            found += [Command(n, line, False) for n in v1_names(piece)]
    return found


def pieces(line: str) -> list[str]:
    """``line`` split at every other line break, with the characters a comparison may skip dropped: both ways round
    (NEL and VT are control characters and line breaks), the first piece first."""
    def drop(text: str) -> str:
        return "".join(c for c in text if not _skippable(c))
    return [drop(p) for p in _OTHER_BREAKS.split(line)] + _OTHER_BREAKS.split(drop(line))[1:]


def foreign(output: str) -> list[Command]:
    """The commands in ``output`` prime-ci did not write: any found but at a line start, any not one of its own,
    a stop-commands block that does not open a group's contents (prime-ci opens none elsewhere); a block's resume
    token counts as its own."""
    out: list[Command] = []
    tokens: set[str] = set()
    previous = None
    for c in commands(output):
        if c.whole and c.name == "stop-commands" and previous is not None and previous.name == "group":
            tokens.add(c.line.lstrip()[len("::stop-commands::"):])
        elif not c.whole or c.name not in (OWN - {"stop-commands"}) | tokens:
            out.append(c)
        previous = c
    return out
