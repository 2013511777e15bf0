"""The continual harness: entries, the store with history and rollback, the prompt section, skills, refinement, the
harness branch.
"""
