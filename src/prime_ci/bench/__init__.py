"""``prime-ci bench``: task suites run as ordinary runs, verdicts, solve rates and harness A/B."""
