"""One run end to end: settings, preparation, the setup phase, the agent loop, the budget ledger, compaction, resume."""
