"""The verdict: gate specs, the runner, failure extraction, the judge's rounds (fast and full), fingerprints,
protected paths, JUnit.
"""
