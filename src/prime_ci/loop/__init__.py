"""The agent loop, shared by the root run and every rlm child: ``Agent``, the budget ledger (``Budget.call``, the one
metered model call), compaction and the base prompt."""
