"""What every model is to the rest of prime-ci: the ``Model`` protocol, the reply it returns (``ModelReply``,
``ToolCall``) and ``endpoint``, the one place these are defined and imported from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from prime_ci.model.usage import Cost, Usage

UNREADABLE = "unreadable"  # the finish reason of a reply the server generated but could not read


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it


@dataclass
class ModelReply:
    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    cost: Cost | None  # None: the model's price is unknown
    finish_reason: str
    model: str
    attempts: int = 1
    errors: list[str] = field(default_factory=list)
    thinking: str = ""  # reasoning text the provider returned (logged, shown; never fed back by itself)
    thinking_blocks: list[dict[str, Any]] | None = None  # signed blocks Anthropic wants back with tool use

    @property
    def cost_usd(self) -> float | None:
        return None if self.cost is None else self.cost.total

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    def to_wire(self) -> dict[str, Any]:
        """The reply as JSON (a child's model call answered by the root)."""
        return {"text": self.text, "finish_reason": self.finish_reason, "model": self.model,
                "attempts": self.attempts, "usage": self.usage.to_json(),
                "cost": None if self.cost is None else self.cost.to_json(), "thinking": self.thinking,
                "thinking_blocks": self.thinking_blocks,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]}

    @classmethod
    def from_wire(cls, r: dict[str, Any]) -> ModelReply:
        calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in r["tool_calls"]]
        cost = None if r.get("cost") is None else Cost.from_json(r["cost"])
        return cls(r["text"], calls, Usage.from_json(r["usage"]), cost, r["finish_reason"], r["model"],
                   r["attempts"], thinking=r.get("thinking") or "", thinking_blocks=r.get("thinking_blocks"))


class Model(Protocol):
    name: str

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int, timeout: float
    ) -> ModelReply: ...


def endpoint(model: Model) -> str:
    """Where a model's calls go, for messages: the URL or provider, else the model's name."""
    return str(getattr(model, "where", "") or model.name)
