"""Unicode format characters (category Cf) and a pattern that folds them out of text."""

from __future__ import annotations

import re
import unicodedata

FORMAT = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]


FOLD = re.compile("[" + "".join(FORMAT) + "]")
