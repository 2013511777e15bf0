"""A run's first estimate of its prompt, before the provider has counted one (issue 40).

The estimate is the prompt's characters at the model's rate (``usage.TokenRate``), which only the provider's counts
calibrate: before the first reply it is a prior of 2 characters a token, twice what a 4-characters-a-token model
counts. Where the server counts tokens itself (llama.cpp's ``/apply-template`` and ``/tokenize``:
``model.server_tokens``), its count of the opening prompt calibrates the rate before the first call: on a small
window the first estimate is then neither past the compaction threshold nor a reason to cut the first completion
to a sliver. Elsewhere the rate stays the measured one. A window that leaves no room for a reply after the system
prompt and the task is a configuration error (exit 2), said in one line before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable

from prime_ci.engine import opening
from prime_ci.engine.prepare import Prepared
from prime_ci.errors import ConfigError
from prime_ci.isolation.untrusted import clean_terminal_text
from prime_ci.loop.agent import TOOL, Conversation
from prime_ci.loop.budget import MIN_COMPLETION
from prime_ci.model.protocol import Model
from prime_ci.model.routes import context_window
from prime_ci.model.server_tokens import ServerCount, count_prompt
from prime_ci.model.usage import TokenRate


async def find_window(prep: Prepared) -> tuple[int, str]:
    """The model's context window and where it came from: ``--context-window``, else ``routes.context_window``."""
    if prep.cfg.context_window:
        return prep.cfg.context_window, "--context-window"
    return await context_window(prep.model)


async def calibrate(model: Model, conversation: Conversation) -> ServerCount | None:
    """The server's count of ``conversation``'s prompt, taken as the model's rate when no provider count has set
    it yet; None (the rate unchanged) unless the model is an ``--api-base`` llama.cpp server that answers."""
    api_base = getattr(model, "api_base", None)
    if conversation.rate.observed or not api_base or model.name.split("/", 1)[0] not in ("openai", "hosted_vllm"):
        return None
    found = await count_prompt(api_base, conversation.messages, [TOOL], conversation.chars,
                               getattr(model, "headers", None))
    if found is not None:
        conversation.rate.observe(found.chars, found.tokens)
    return found


async def preflight(prep: Prepared, rate: TokenRate, say: Callable[[str], None]) -> tuple[int, str]:
    """Before a new run starts: the model's window, and the server's count of the system prompt and the task
    (the setup and builds that have not run yet left out) calibrating ``rate``. Raises ConfigError when the
    window leaves no room for a reply after them."""
    window, source = await find_window(prep)
    first = Conversation(rate=rate)
    first.add({"role": "system", "content": opening.system_prompt(prep, [])})
    if task := clean_terminal_text(prep.cfg.task_text()):
        first.add({"role": "user", "content": task})
    found = await calibrate(prep.model, first)
    if found is None:
        return window, source
    counted = found.prompt(first.chars)
    say(f"first estimate ~{first.tokens} tokens: the server counts {counted} in the system prompt and the task "
        f"({found.how})")
    if window - first.tokens < MIN_COMPLETION:
        larger = ("give a larger --context-window, as far as the server's own window allows"
                  if source == "--context-window" else "start the server with a larger context (llama-server -c N)")
        raise ConfigError(f"the context window ({window} tokens, {source}) leaves no room for a reply: the server "
                          f"counts {counted} tokens in the system prompt and the task ({found.how}); {larger}")
    return window, source
