"""The Prime Agent v3 session log: the crash-safe writer, the tolerant reader, ``prime-ci show``."""
