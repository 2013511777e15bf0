"""A llama.cpp server's own count of a prompt's tokens, asked before the first call.

Before the provider has counted any prompt, the estimate has only a prior rate (``usage.TokenRate``): 2
characters a token, which doubles a 4-characters-a-token model's prompt and, on a 2,048-token window, puts the
system prompt and the task past the compaction threshold. llama.cpp counts exactly without generating: its
``POST /apply-template`` renders the messages and tools with the model's chat template (the prompt a chat request
evaluates) and ``POST /tokenize`` splits that text with the model's tokenizer (``add_special``: BOS as a chat
request adds it). An older build without ``/apply-template`` still tokenizes: the prompt's JSON text then, a
ratio. Both live at the server's root (``http://host:8080``), beside ``/v1``.

A server is taken for llama.cpp by its ``GET /models`` (``owned_by: llamacpp``, or a ``meta`` with ``n_ctx``):
no other server's ``/tokenize`` is asked, since its meaning there is not this one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prime_ci.model.providers import model_entries, tls_context

if TYPE_CHECKING:
    import httpx

TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ServerCount:
    """``tokens`` the server counted over ``chars`` characters of the prompt as the estimate measures them;
    ``how`` names the endpoints. ``exact``: the whole prompt as the server evaluates it (``/apply-template``)."""

    tokens: int
    chars: int
    how: str
    exact: bool

    def prompt(self, chars: int) -> int:
        """The server's count of a prompt of ``chars`` characters: the count itself when it was of that prompt,
        else at the counted ratio."""
        return self.tokens if self.exact else -(-chars * self.tokens // max(1, self.chars))


def server_root(api_base: str) -> str:
    """``http://host:8080`` of an ``--api-base`` like ``http://host:8080/v1``."""
    return re.sub(r"/v1$", "", api_base.rstrip("/"))


async def count_prompt(api_base: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], chars: int,
                       headers: dict[str, str] | None = None) -> ServerCount | None:
    """The server's count of the prompt ``messages`` + ``tools`` (``chars`` characters by the estimate's measure),
    or None when the server is not llama.cpp or does not answer (the estimate keeps its measured rate)."""
    import httpx

    root = server_root(api_base)
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False, headers=headers or {},
                                     verify=tls_context()) as client:
            if not _is_llama(await model_entries(client, api_base)):
                return None
            rendered = await _post(client, root + "/apply-template", {"messages": messages, "tools": tools})
            prompt = rendered.get("prompt") if rendered is not None else None
            if isinstance(prompt, str) and (found := await _tokenize(client, root, prompt)) is not None:
                return ServerCount(found, chars, "/apply-template + /tokenize", exact=True)
            text = json.dumps(tools, ensure_ascii=False) + json.dumps(messages, ensure_ascii=False)
            if (found := await _tokenize(client, root, text)) is not None:
                return ServerCount(found, len(text), "/tokenize of the prompt's text", exact=False)
    except httpx.HTTPError:
        return None
    return None


def _is_llama(entries: list[dict[str, Any]]) -> bool:
    """Whether ``GET /models`` answered as llama-server does."""
    for entry in entries:
        meta = entry.get("meta")
        if entry.get("owned_by") == "llamacpp" or (isinstance(meta, dict) and "n_ctx" in meta):
            return True
    return False


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any] | None:
    response = await client.post(url, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        data = response.json() if response.status_code == 200 else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


async def _tokenize(client: httpx.AsyncClient, root: str, text: str) -> int | None:
    answer = await _post(client, root + "/tokenize", {"content": text, "add_special": True, "parse_special": True})
    tokens = answer.get("tokens") if answer is not None else None
    return len(tokens) if isinstance(tokens, list) and tokens else None
