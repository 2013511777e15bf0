"""A tool call's arguments cut off mid-string, as a reply stopped at its length limit leaves them."""

from __future__ import annotations

CUT = '{"code": "open(\'big.py\', \'w\').write(\'\'\'\\nline 1\\nli'
