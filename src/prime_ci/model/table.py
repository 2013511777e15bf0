"""litellm's own model table (prices, windows, capabilities) read as data, without importing litellm.

The table is the JSON file litellm ships and loads itself when ``LITELLM_LOCAL_MODEL_COST_MAP`` is set; reading
it takes ~20 ms where importing litellm takes seconds, so start-up decisions (is the model priced? its window,
its output limit) are made before the import finishes, and the direct route never imports litellm for a model
the table does not list. Costs themselves are computed by litellm's cost functions (``routes.py``).
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any

TABLE_FILE = "model_prices_and_context_window_backup.json"
PROVIDERS_FILE = "provider_endpoints_support_backup.json"


def _data_file(name: str) -> Any:
    spec = importlib.util.find_spec("litellm")  # locates the package without running its __init__
    if spec is None or spec.origin is None:
        return {}
    path = Path(spec.origin).parent / name
    return json.loads(path.read_bytes()) if path.is_file() else {}


@cache
def _table() -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = _data_file(TABLE_FILE)
    data.pop("sample_spec", None)
    return data


@cache
def listed_providers() -> frozenset[str]:
    """Provider prefixes litellm's data files name (its endpoint-support list and the model table); litellm's
    own ``provider_list`` has a few more, which ``routes.known_provider`` asks it for."""
    providers = _data_file(PROVIDERS_FILE).get("providers") or {}
    in_table = {str(v.get("litellm_provider")) for v in _table().values() if isinstance(v, dict)}
    return frozenset(providers) | frozenset(in_table)


def lookup_names(model: str) -> list[str]:
    """Keys to try for ``provider/model``: the full id, then the bare model (litellm lists both forms)."""
    names = [model]
    if "/" in model:
        names.append(model.split("/", 1)[1])
    return names


def model_info(model: str) -> dict[str, Any]:
    """The table entry of a model id; empty for models litellm does not list."""
    table = _table()
    for name in lookup_names(model):
        if name in table:
            return table[name]
    return {}


def is_priced(model: str) -> bool:
    info = model_info(model)
    return info.get("input_cost_per_token") is not None and info.get("output_cost_per_token") is not None


def per_token_prices(model: str) -> tuple[float, float] | None:
    """USD per (uncached) prompt token and per completion token: the worst case a reservation holds."""
    info = model_info(model)
    if not is_priced(model):
        return None
    return float(info["input_cost_per_token"]), float(info["output_cost_per_token"])


def window(model: str) -> int | None:
    info = model_info(model)
    value = info.get("max_input_tokens") or info.get("max_tokens")
    return value if isinstance(value, int) and value > 0 else None


def max_output(model: str) -> int | None:
    value = model_info(model).get("max_output_tokens")
    return value if isinstance(value, int) and value > 0 else None
