"""rlm sub-agents: the root's family (spawning, routing, the shared ledger) and the child host (``python -m
prime_ci.child``).
"""
