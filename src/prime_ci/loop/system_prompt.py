"""System prompts: the fixed base prompt shipped in the package (never a refinement target) plus sections."""

from __future__ import annotations

from importlib import resources


def base_prompt() -> str:
    return resources.files("prime_ci").joinpath("prompts/system.md").read_text(encoding="utf-8")


def child_section(name: str, depth: int, role: str | None = None) -> str:
    role_text = f"\n## Your role ({name})\n\n{role.strip()}\n" if role else ""
    return role_text + (
        "\n## You are a sub-agent\n\n"
        f"You are the rlm child `{name}` at depth {depth}, started by a parent agent with the task in the first "
        "message. Your parent sees none of your turns: when you have the answer, or need to report progress, "
        "send it with `await agent_message.send(text, receiver_role=\"parent\")`. Messages for you arrive as "
        "user messages. There are no quality gates for you; end your turn (reply without the tool) when done.\n"
    )
