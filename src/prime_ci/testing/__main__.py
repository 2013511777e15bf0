"""``python -m prime_ci.testing serve --script steps.json``: the scripted server, standalone."""

from __future__ import annotations

from prime_ci.testing import main

raise SystemExit(main())
