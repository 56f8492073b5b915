"""Validation tables: stage rows x subset columns, each rate with its 95% interval and n, and the
changes between stages that chance does not explain marked (how: `change_note`)."""

from __future__ import annotations

from collections.abc import Sequence

from core.rundir.records import level_order, row_level
from core.stats import change, rate_text
from curriculum.tasks.base import TaskReport
from eval.report.blocks import Table, Text, fmt, md_escape
from eval.report.series import StageGrid

UP, DOWN = "▲", "▼"


def change_note(report: TaskReport) -> str:
    """How a rate cell reads and when a change is marked, in the words of the run's task.

    >>> change_note(TaskReport()).startswith("Each rate: its value, its 95% Wilson interval [low, high] and n, "
    ...                                      "the distinct problems it counts. ▲")
    True
    """
    record, pool = md_escape(report.record), f" ({md_escape(report.pool_note)})" if report.pool_note else ""
    return (f"Each rate: its value, its 95% Wilson interval [low, high] and n, the distinct {record}s it "
            f"counts{pool}. {UP} / {DOWN}: up / down from the last validated stage above it, beyond chance: "
            "Newcombe's 95% interval for the difference (built from the two Wilson intervals) excludes 0. An "
            f"unmarked change is within noise. Every stage is validated on the same {record}s, so a paired "
            "test would be sharper: this one marks less rather than more.")


def change_marks(values: Sequence[float | None], ns: Sequence[int | None]) -> list[str]:
    """"▲" / "▼" / "" per stage: a change from the last stage above that has a value, beyond chance.

    >>> change_marks([0.1, None, 0.6, 0.55], [100, None, 100, 100])
    ['', '', '▲', '']
    """
    marks, last = [], None
    for value, n in zip(values, ns, strict=True):
        step = change(*last, value, n) if last is not None else 0
        marks.append({1: UP, -1: DOWN}.get(step, ""))
        if value is not None:
            last = (value, n)
    return marks


def rate_cells(grid: StageGrid, level: str) -> list[str]:
    """One subset's column: each stage's rate with its interval and n, and its change mark."""
    values = grid.values[level]
    ns = grid.trials.get(level) or [None] * len(values)
    return [f"{rate_text(v, n)} {mark}".rstrip() if v is not None else "-"
            for v, n, mark in zip(values, ns, change_marks(values, ns), strict=True)]


def grid_table(grid: StageGrid, *, rate: bool = True, digits: int = 1, first: str = "after stage") -> Table:
    """Stage rows x subset columns (the transpose of the plot: one row per stage reads better)."""
    columns = {level: rate_cells(grid, level) if rate else [fmt(v, digits) for v in grid.values[level]]
               for level in grid.levels}
    rows = [[stage, *(columns[level][i] for level in grid.levels)] for i, stage in enumerate(grid.stages)]
    return Table([first, *grid.levels], rows)


def pool_sizes(rows: Sequence[dict], report: TaskReport) -> Text | None:
    """What the accuracies count: the distinct records of each subset and the samples per record.

    >>> pool_sizes([{"level": "2steps", "n": 63, "puzzles": 63}, {"level": "3steps", "n": 200, "puzzles": 100}],
    ...            TaskReport()).text
    '**validation pools** (distinct problems): 2steps 63 · 3steps 100 (2 samples each)'
    """
    latest: dict[str, dict] = {}
    for row in rows:
        if row_level(row) is not None:
            latest[row_level(row)] = row
    if not latest:
        return None
    parts = []
    for level in sorted(latest, key=level_order):
        row = latest[level]
        puzzles, n = row.get("puzzles") or row.get("n"), row.get("n")
        samples = f" ({n // puzzles} samples each)" if isinstance(n, int) and puzzles and n > puzzles else ""
        parts.append(f"{level} {fmt(puzzles)}{samples}")
    return Text(f"**validation pools** ({md_escape(report.distinct)}): " + " · ".join(parts))
