"""rlm sub-agents: the root's family (spawning, routing, the shared ledger) and the child host (``python -m
prime_ci.child``).
"""

# the environment variable carrying a child's bridge token to its host process (never written to disk)
TOKEN_VAR = "PRIME_CI_CHILD_TOKEN"
