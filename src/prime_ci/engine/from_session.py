"""``prime-ci run REPO --from-session FILE``: go on with the conversation of a session Prime Agent (or prime-ci)
wrote, under this run's gates and budgets.

What is taken is what the model saw last there, by Prime Agent's context rule and converter
(``prime_agent_context``): the active branch (the parent
chain from the last entry), and with a compaction on it the latest one's summary, the entries from its
``firstKeptEntryId`` up to it, and those after it. Those entries are written again into the new session (new
ids, one chain; assistant usage zeroed, as that spend was the earlier session's) with the summary as a
``compaction`` entry after the kept ones, so Prime Agent's context builder makes the same conversation of the
new file; its header's ``parentSession`` names the file it came from. The model is then told the kernel is new.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.engine.prime_agent_context import provider_message
from prime_ci.errors import ConfigError
from prime_ci.loop.agent import Agent
from prime_ci.loop.compact import summary_message
from prime_ci.model.usage import Cost, Usage, session_usage
from prime_ci.session.log import VERSION, SessionLog, read_session
from prime_ci.session.read import parts_text
from prime_ci.session.wellformed import malformed

NOT_RUN = "[not run: the session was continued in prime-ci before this call had a result]"


@dataclass
class Origin:
    path: Path
    session_id: str
    kept: list[dict[str, Any]] = field(default_factory=list)  # context entries before the compaction
    summary: str | None = None  # the latest compaction's summary
    after: list[dict[str, Any]] = field(default_factory=list)  # context entries after it (all, without one)
    task: str = ""  # the first user message's text on the branch: what the conversation was asked to do
    load_s: float = 0.0  # seconds the load took: the run's wall clock counts them


def load_origin(path: Path) -> Origin:
    """The conversation of the session at ``path``; ``ConfigError`` (one line) when it cannot be read as one.

    Linear in the file's size (the run's clock counts it: ``Origin.load_s``). Every entry on the active branch that
    the conversation is made of is checked first: a malformed one is refused naming its line."""
    started = time.monotonic()
    what = f"--from-session {path}"
    try:
        session = read_session(path)
    except FileNotFoundError:
        raise ConfigError(f"{what}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what}: cannot be read ({exc.__class__.__name__}: {exc})") from None
    header = session.header
    if header.get("type") != "session" or not isinstance(header.get("id"), str):
        raise ConfigError(f"{what}: not a session file (its first line is no Prime Agent session header)")
    version = header.get("version", 1)  # Prime Agent's rule: a header without one is version 1
    if type(version) is not int or not 1 <= version <= VERSION:
        raise ConfigError(f"{what}: session version {ascii(version)[:20]} is not one prime-ci reads (1 to {VERSION})")
    indices = session.branches().path
    for i in indices:
        if (problem := malformed(session.entries[i])) is not None:
            line = session.lines[i] if i < len(session.lines) else "?"
            raise ConfigError(f"{what}: line {line}: {problem}; nothing was started")
    branch = [session.entries[i] for i in indices]
    at = max((i for i, e in enumerate(branch) if e.get("type") == "compaction"), default=None)
    origin = Origin(path.resolve(), header["id"])
    if at is None:
        origin.after = [e for e in branch if provider_message(e) is not None]
    else:
        compaction = branch[at]
        kept = _kept_from(compaction, session.entries)
        first = next((i for i, e in enumerate(branch[:at]) if kept(e)), at)
        origin.summary = str(compaction.get("summary") or "")
        origin.kept = [e for e in branch[first:at] if provider_message(e) is not None]
        origin.after = [e for e in branch[at + 1:] if provider_message(e) is not None]
    if origin.summary is None and not origin.after:
        raise ConfigError(f"{what}: the session has no conversation to continue")
    origin.task = next((parts_text(e["message"].get("content") or "") for e in branch if e.get("type") == "message"
                        and e["message"].get("role") == "user"), "")
    origin.load_s = time.monotonic() - started
    return origin


def _kept_from(compaction: dict[str, Any], entries: list[dict[str, Any]]) -> Callable[[dict[str, Any]], bool]:
    """Whether an entry is the one a compaction keeps from: named by ``firstKeptEntryId``, or in a version-1 file
    (no ids) by ``firstKeptEntryIndex`` among the file's entries, header included, as Prime Agent migrates it."""
    index = compaction.get("firstKeptEntryIndex")
    if "firstKeptEntryId" not in compaction and type(index) is int and 1 <= index <= len(entries):
        target = entries[index - 1]
        return lambda entry: entry is target
    first = compaction.get("firstKeptEntryId")
    return lambda entry: entry.get("id") == first


class Continuation:
    """Writes an origin's conversation into a new session and gives it to the agent's conversation.

    A call that got no result is answered (``NOT_RUN``, logged) right after the results its turn did get, before
    the next message, where chat APIs require it and where Prime Agent's provider layer puts its own answer; a
    result whose call is not in the context is left out, as a provider would refuse it."""

    def __init__(self, origin: Origin, log: SessionLog) -> None:
        self.origin, self.log = origin, log
        self._calls: list[str] = []  # the calls of the latest assistant turn that have no result yet

    def write(self, note: str) -> list[tuple[dict[str, Any], str]]:
        """(provider message, entry id) in context order: the summary first, then the kept and later entries."""
        origin = self.origin
        start = self.log.custom("prime_ci.from_session", {"file": str(origin.path), "session": origin.session_id,
                                                          "load_s": round(origin.load_s, 3)})
        kept = [m for e in origin.kept for m in self._copy(e)]
        head: list[tuple[dict[str, Any], str]] = []
        if origin.summary is not None:
            first = next((eid for _, eid in kept), start)  # nothing kept: an entry that adds nothing to the context
            eid = self.log.append("compaction", summary=origin.summary, firstKeptEntryId=first, tokensBefore=0,
                                  details={"fromSession": str(origin.path)})
            head = [(summary_message(origin.summary), eid)]
        after = [m for e in origin.after for m in self._copy(e)]
        answers = self._answers()
        said = self.log.custom_message("prime_ci.from_session", note)
        return [*head, *kept, *after, *answers, ({"role": "user", "content": note}, said)]

    def _copy(self, entry: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
        """The entry written again, after the answers its place calls for; its message first in none or one."""
        message = provider_message(entry)
        assert message is not None
        if message["role"] == "tool":
            if message.get("tool_call_id") not in self._calls:
                return []  # a result whose call is not in the context: a provider would refuse it
            self._calls.remove(str(message["tool_call_id"]))
            out: list[tuple[dict[str, Any], str]] = []
        else:
            out = self._answers()
        if entry.get("type") == "message":
            logged = dict(entry["message"])
            if logged.get("role") == "assistant":
                logged["usage"] = session_usage(Usage(), Cost())
            eid = self.log.append("message", message=logged)
        elif entry.get("type") == "branch_summary":
            eid = self.log.append("branch_summary", summary=entry.get("summary"), fromId=self.log.last_id or "")
        else:
            eid = self.log.append("custom_message", customType=str(entry.get("customType") or "custom"),
                                  content=entry.get("content"), display=bool(entry.get("display", True)))
        if message["role"] == "assistant":
            self._calls = [c["id"] for c in message.get("tool_calls") or []]
        return [*out, (message, eid)]

    def _answers(self) -> list[tuple[dict[str, Any], str]]:
        """Answers for the calls still open, in the order they were made; none are open after."""
        out = []
        for call in self._calls:
            eid = self.log.message("toolResult", [{"type": "text", "text": NOT_RUN}], toolCallId=call, toolName="",
                                   isError=True)
            out.append(({"role": "tool", "tool_call_id": call, "content": NOT_RUN}, eid))
        self._calls = []
        return out


def go_on(agent: Agent, origin: Origin, base_commit: str) -> None:
    """Start the agent's conversation (after its system prompt) from the origin's, then say what is new."""
    note = (f"[prime-ci] This conversation goes on from the session {origin.path.name} in prime-ci, in a fresh "
            f"clone of the repository at {base_commit[:12]}: changes made to files before are not here unless they "
            "were committed, and the Python kernel is new (no variable, import or process from before exists). "
            "Check the state of the work first, then continue.")
    written = Continuation(origin, agent.log).write(note)
    for message, eid in written:
        agent.conversation.add(message, eid)
    # a call before this run's first reply (a compaction of the long conversation) is folded into the last reply
    # copied, whose usage here is zero: Prime Agent then counts it, once, as result.json does
    if replies := [eid for message, eid in written if message["role"] == "assistant"]:
        agent.adopt(replies[-1], session_usage(Usage(), Cost()))
