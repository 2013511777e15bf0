"""The context-window line reads as one parenthesis (issue 23 trials)."""

from __future__ import annotations

import asyncio

from prime_ci.model.routes import DEFAULT_WINDOW, context_window
from prime_ci.testing import ScriptedModel


def test_unknown_model_window_source_has_no_nested_parentheses() -> None:
    window, source = asyncio.run(context_window(ScriptedModel(name="scripted/no-such-model-anywhere")))
    assert window == DEFAULT_WINDOW
    line = f"context window {window} tokens ({source})"
    assert "(" not in source and ")" not in source and "--context-window" in source, line
