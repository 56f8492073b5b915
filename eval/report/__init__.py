"""The report of a run, a sweep, or runs side by side: `python -m eval.report` (see `eval.report.cli`)."""

from eval.report.cli import latest_output, main, write_report

__all__ = ["latest_output", "main", "write_report"]
