"""What a run leaves behind: result.json and summary.md, the multi-run report, the notebook, the JSON Schemas."""
