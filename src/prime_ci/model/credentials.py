"""Is the provider's key there? Checked before anything is cloned, in milliseconds.

litellm knows which variables each provider needs (``litellm.validate_environment``) but takes seconds to
import, longer than a person waits for "your key is missing". ``KEYS`` holds litellm's answer for the providers
that need one plain API key; ``tests/test_credentials.py`` checks every row against litellm itself. Providers
with other schemes (cloud roles, ADC files, local servers) are left to the provider's own answer, which an
authentication error reports without retrying.
"""

from __future__ import annotations

import os

# provider prefix -> variables, any one of which is enough (litellm.validate_environment's missing_keys)
KEYS: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "perplexity": ("PERPLEXITYAI_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "moonshot": ("MOONSHOT_API_KEY",),
    "dashscope": ("DASHSCOPE_API_KEY",),
    "nvidia_nim": ("NVIDIA_NIM_API_KEY",),
    "huggingface": ("HUGGINGFACE_API_KEY",),
}
# an OpenAI-compatible endpoint of one's own (vLLM, llama.cpp, Ollama, a gateway) often needs no key
KEYLESS_WITH_API_BASE = frozenset({"openai"})


def model_problem(model: str, api_base: str | None) -> str | None:
    """Why ``--model`` cannot work, found before any work: an unknown provider prefix or a missing key."""
    from prime_ci.model.routes import known_provider

    if not model.startswith("replay:") and ("/" not in model or not known_provider(model)):
        return (f"--model {model}: unknown provider {model.split('/', 1)[0]!r}: expected a litellm id like "
                "anthropic/claude-sonnet-4-5, openai/gpt-4o (or openai/NAME with --api-base), hosted_vllm/NAME, "
                "or replay:SESSION.jsonl")
    return missing_credentials(model, api_base)


def missing_credentials(model: str, api_base: str | None) -> str | None:
    """One sentence naming the missing variable, or None when the key is present or not checkable here."""
    provider = model.split("/", 1)[0] if "/" in model else ""
    needed = KEYS.get(provider)
    if needed is None or (api_base and provider in KEYLESS_WITH_API_BASE):
        return None
    if any(os.environ.get(name) for name in needed):
        return None
    names = " or ".join(needed)
    return (f"--model {model}: the {provider} provider needs {names} in the environment, and it is not set "
            f"(in GitHub Actions: `env: {needed[0]}: ${{{{ secrets.{needed[0]} }}}}`)")
