"""One run end to end: settings, preparation, the setup phase, running the loop with its family and gates, resume,
the finish (verdict, artifacts, harness refinement)."""
