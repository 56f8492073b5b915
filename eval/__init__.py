"""Per-level validation of any task (graded by the task), `python -m eval` and the run report."""
