from __future__ import annotations

from prime_ci.cli import main

main()
