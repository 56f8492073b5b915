"""Per-level validation of any task, `python -m eval` and the run report (K&K's grader: curriculum/tasks/kk/grading/)."""
