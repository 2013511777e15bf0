"""The harness part of the system prompt, and subagent specs for children started by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prime_ci.harness.frontmatter import one_line
from prime_ci.harness.store import NAME_RE, HarnessStore

if TYPE_CHECKING:
    from prime_ci.harness.skills import Skill


def prompt_section(store: HarnessStore | None, *, limit: int = 12000, skills: Sequence[Skill] | None = None) -> str:
    """The delimited harness part of the system prompt; '' when there is nothing to show.

    Prompt notes and memories in full up to ``limit`` characters (truncation is stated), then an index of
    skills (``skills``: discovered ``prime_ci.harness.skills.Skill`` objects; default: the store's skill entries)
    and subagents. Untrusted entries are left out and counted. ``store`` None: only the skills index.
    """
    entries = store.list() if store is not None else []
    trusted = [e for e in entries if e.trusted]
    untrusted = len(entries) - len(trusted)
    out: list[str] = []
    budget = limit
    omitted: list[str] = []
    for kind, title in (("prompt", "Prompt notes"), ("memory", "Memories")):
        group = [e for e in trusted if e.kind == kind]
        if group:
            out.append(f"## {title}")
        for e in group:
            first = e.body.strip().split("\n", 1)[0].lstrip("#").strip()
            label = f" ({e.description})" if e.description and one_line(first) != e.description else ""
            text = f"### {e.name}{label}\n{e.body.strip()}"
            text = text.replace("</harness>", "<\\/harness>")
            if len(text) <= budget:
                out.append(text)
                budget -= len(text)
            elif budget >= 200:
                out.append(f"{text[:budget]}\n[truncated: {len(text) - budget} more characters; read it with "
                           f"`await harness.read({kind!r}, {e.name!r})`]")
                budget = 0
            else:
                omitted.append(f"{kind}:{e.name}")
    if omitted:
        out.append(f"[not shown for space ({limit} characters): {', '.join(omitted)}; read them with "
                   "`await harness.read(kind, name)`]")
    if skills is not None:
        from prime_ci.harness.skills import index_text

        index = index_text(skills)
    else:
        index = "\n".join(f"- {e.name}: {one_line(e.description, 200)} ({e.path})"
                          for e in trusted if e.kind == "skill")
    if index:
        out.append("## Skills (read a skill's SKILL.md before using it)\n" + index)
    subagents = [e for e in trusted if e.kind == "subagent"]
    if subagents:
        lines = [f"- {e.name}: {one_line(e.description, 200)}" + (f" (model: {e.model})" if e.model else "")
                 for e in subagents]
        out.append("## Subagents (`await rlm(task, name=NAME)` starts a child with that role prompt and model)\n"
                   + "\n".join(lines))
    if untrusted:
        out.append(f"[{untrusted} untrusted entries awaiting review; not loaded]")
    if not out:
        return ""
    head = ("Continual harness: notes, memories, skills and subagents kept from earlier runs. Fix entries "
            "that prove wrong with the `harness` API.")
    return "<harness>\n" + head + "\n\n" + "\n\n".join(out) + "\n</harness>"


def subagent_spec(store: HarnessStore, name: str) -> tuple[str, str | None] | None:
    """(role prompt, model or None) of a trusted subagent entry, or None."""
    if not NAME_RE.fullmatch(name):
        return None
    entry = store.get("subagent", name)
    if entry is None or not entry.trusted:
        return None
    return entry.body, entry.model
