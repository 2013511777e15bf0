from __future__ import annotations

from prime_ci.cli.commands import main

main()
