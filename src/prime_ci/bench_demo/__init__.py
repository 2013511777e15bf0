"""The bundled suite of ``prime-ci bench --demo``: eight small repositories with real-looking bugs, two harness
states (``base`` and ``refined``) and the recorded sessions that replay the runs (see README.md here)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent
SUITE = ROOT / "suite.toml"
HARNESSES = ("base", "refined")


def harness_dirs() -> list[str]:
    """The bundled harness states, baseline first: the A/B that ``prime-ci bench --demo`` runs by default."""
    return [str(ROOT / "harness" / name) for name in HARNESSES]
