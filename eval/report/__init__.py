"""The report of a run, a sweep, or runs side by side: `python -m eval.report` (see `eval.report.cli`).

blocks: what a report is made of and how it renders (Markdown, self-contained HTML);
series: run and sweep folders read into plain series and tables; plots: those drawn as PNGs;
adaptive: promotions and guard events; run / sweep: the two kinds of report; cli: the entry point.
"""

from eval.report.cli import latest_output, main, write_report

__all__ = ["latest_output", "main", "write_report"]
