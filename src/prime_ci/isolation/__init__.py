"""What model-written code may see and touch: worktrees and hardened git, the sandbox, the project's environment,
processes, redaction, untrusted text.
"""
