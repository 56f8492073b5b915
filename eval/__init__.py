"""The grader, per-subset validation, `python -m eval` and the run report."""
