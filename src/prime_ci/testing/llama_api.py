"""llama.cpp's own endpoints in the scripted server's llama.cpp mode (``strict``), beside the OpenAI ones.

``POST /apply-template`` renders a chat request (its ``messages`` and ``tools``) as the prompt the server would
evaluate: here its "chat template" is the JSON text of the messages and the tools, the text the server counts a
chat request's prompt over. ``POST /tokenize`` (``content``, ``add_special``, ``with_pieces``, as llama.cpp's)
splits text with a deterministic tokenizer of its own: one token for every 4 characters, ids from a checksum of
the piece, and the BOS token first with ``add_special``. A chat request's prompt tokens are the tokens of its
rendering with the special ones, so ``/apply-template`` then ``/tokenize`` with ``add_special`` is the count the
server reports for that request, as on llama.cpp (``usage_scale`` 1).
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

from prime_ci.testing.steps import Body

PATHS = frozenset({"/tokenize", "/apply-template"})
BOS = 1
PIECE = 4  # characters a token
VOCAB = 32_000


def render(body: Body) -> str:
    """The prompt a chat request renders to: its messages and tools as JSON (absent ones as empty lists)."""
    return json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))


def prompt_tokens(body: Body) -> int:
    """What the server counts a chat request's prompt as: its rendering's tokens, BOS included."""
    return math.ceil(len(render(body)) / PIECE) + 1


def tokenize(text: str, *, add_special: bool = False) -> list[tuple[int, str]]:
    """(id, piece) of each token of ``text``; with ``add_special`` the BOS token (an empty piece) first."""
    pieces = [text[i : i + PIECE] for i in range(0, len(text), PIECE)]
    ids = [(2 + zlib.crc32(p.encode("utf-8", "surrogatepass")) % (VOCAB - 2), p) for p in pieces]
    return [(BOS, ""), *ids] if add_special else ids


def tokenize_body(body: Body) -> Body:
    """The answer to ``POST /tokenize``: ``{"tokens": [ids]}``, or ``[{"id", "piece"}]`` with ``with_pieces``;
    no ``content`` is no tokens (llama.cpp's answer too)."""
    content = body.get("content")
    found = tokenize(content, add_special=body.get("add_special") is True) if isinstance(content, str) else []
    tokens: list[Any] = ([{"id": i, "piece": p} for i, p in found] if body.get("with_pieces") is True
                         else [i for i, _ in found])
    return {"tokens": tokens}


def template_problem(body: Body) -> str | None:
    """Why ``POST /apply-template`` refuses ``body`` (400), as llama.cpp's parser does."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "'messages' is required and must be an array"
    return None
