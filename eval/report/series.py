"""A run directory -> plain series and tables for the report (no matplotlib here). A run may still be being
written: a missing file is an empty list, a torn jsonl line is skipped and counted, a missing key a missing series."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.checks import is_number
from core.rundir.files import BASELINE, CONFIG, METRICS, RUN_JSON, VALIDATION, read_mapping, scan_jsonl
from core.rundir.records import level_order, row_level, stage_records
from core.stats import wilson_interval
from curriculum.tasks.base import TaskReport
from eval.metrics import RATES, trials


@dataclass(frozen=True)
class Series:
    """One line of a plot: `y[i]` at `x[i]`; a rate's 95% interval `low[i]..high[i]` when known."""

    label: str
    x: list
    y: list
    low: list | None = field(default=None, repr=False)
    high: list | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Boundary:
    step: float  # half a step before the stage's first: the line falls between two stages' steps
    label: str  # its level ("2ppl", "2-6ppl", "3steps")


@dataclass(frozen=True)
class StageGrid:
    """One validation metric as stage (columns: baseline first) x subset (one row per level)."""

    stages: list[str]
    levels: list[str]
    values: dict[str, list]
    trials: dict[str, list] = field(default_factory=dict, repr=False)  # each cell's n (None: unknown)


@dataclass
class RunData:
    """What a run directory holds, read once; `notes` says what could not be read."""

    path: Path
    manifest: dict
    config: dict
    steps: list[dict]
    validation: list[dict]
    notes: list[str] = field(default_factory=list)

    @property
    def task_report(self) -> TaskReport:
        """How run.json says the run's task is shown; a record that does not read: as every task is."""
        return TaskReport.from_json(self.manifest.get("task_report")) or TaskReport()


def load_run(run_dir: Path) -> RunData:
    """run.json, config.yaml, metrics.jsonl (step rows) and validation.jsonl of `run_dir`, none through a link out."""
    metrics, validation = (scan_jsonl(run_dir / name, inside=run_dir) for name in (METRICS, VALIDATION))
    # per-step rows only: a stage's end-of-training summary line (kind "summary") has no step metrics
    steps = [r for r in metrics.rows if r.get("kind", "summary" if "train_runtime" in r else "step") == "step"]
    manifest, config = (read_mapping(run_dir / name, inside=run_dir) for name in (RUN_JSON, CONFIG))
    run = RunData(run_dir, manifest, config, steps, validation.rows)
    for name, scan in ((METRICS, metrics), (VALIDATION, validation)):
        if scan.damaged:
            run.notes.append(f"{name}: skipped {len(scan.damaged)} unreadable line(s) (torn while the run writes)")
    if not run.manifest:
        run.notes.append("run.json is missing or unreadable: stage boundaries come from metrics.jsonl")
    return run


# A trainer's metric is a float32 tensor's: a value beyond float32's range is no measurement, and matplotlib's
# axis arithmetic (a span, its headroom) overflows to inf on values near float64's largest, refusing the limits.
LARGEST_METRIC = 3.4028234663852886e38


def as_number(value) -> float | None:
    """`value` as a finite float within float32's range, or None (missing, text, NaN, inf, beyond).

    >>> as_number(2), as_number("2"), as_number(float("inf")), as_number(1e39), as_number(10 ** 400)
    (2.0, None, None, None, None)
    """
    if not is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float (JSON holds any)
        return None
    return number if abs(number) <= LARGEST_METRIC else None  # NaN compares False: None


def numbers(rows: Iterable[dict], key: str) -> list[float]:
    """The `key` of each row that has it as a number (`as_number`), in order."""
    return [v for r in rows if (v := as_number(r.get(key))) is not None]


def stage_steps(steps: Sequence[dict], index: int | None) -> list[dict]:
    """The step rows of stage `index`, by stage step, each step once."""
    rows = {int(row["stage_step"]): row for row in steps
            if row.get("stage") == index and as_number(row.get("stage_step")) is not None}
    return [rows[k] for k in sorted(rows)]


def rows_at(validation: Sequence[dict], index) -> dict[str, dict]:
    """The validation rows after stage `index`, by level (the last row of each)."""
    return {row_level(r): r for r in validation if r.get("stage") == index and row_level(r) is not None}


def step_series(rows: Iterable[dict], key: str, label: str | None = None) -> Series | None:
    """`key` per global step (NaN where it is no measurement: a gap); None when no row has a finite one.

    >>> rows = [{"global_step": 2, "kl": 0.5}, {"global_step": 1, "kl": 0.1}, {"global_step": 3}]
    >>> step_series(rows, "kl")
    Series(label='kl', x=[1, 2], y=[0.1, 0.5])
    >>> step_series(rows, "entropy") is None
    True
    """
    points = {}
    for row in rows:
        step, value = as_number(row.get("global_step")), row.get(key)
        if step is not None and is_number(value):
            number = as_number(value)
            points[int(step)] = float("nan") if number is None else number
    points = dict(sorted(points.items()))
    if all(math.isnan(value) for value in points.values()):
        return None
    return Series(label or key, list(points), list(points.values()))


def step_band(rows: Sequence[dict], low: str, high: str) -> tuple[Series, Series] | None:
    """(low, high) per step over the rows that have both, so the two share their x (a fill needs that).

    >>> step_band([{"global_step": 1, "lo": 1, "hi": 3}, {"global_step": 2, "hi": 4}], "lo", "hi")
    (Series(label='lo', x=[1], y=[1.0]), Series(label='hi', x=[1], y=[3.0]))
    >>> step_band([{"global_step": 1, "lo": 1, "hi": 3}, {"global_step": 2, "lo": 1, "hi": float("inf")}], "lo", "hi")
    (Series(label='lo', x=[1, 2], y=[1.0, 1.0]), Series(label='hi', x=[1, 2], y=[3.0, nan]))
    """
    both = [r for r in rows if is_number(r.get(low)) and is_number(r.get(high))]
    low_series, high_series = step_series(both, low), step_series(both, high)
    return (low_series, high_series) if low_series and high_series else None


def reward_series(rows: Sequence[dict]) -> list[Series]:
    """The total reward, then each component's mean (`rewards/<name>/mean`), in the order logged.

    >>> rows = [{"global_step": 1, "reward": 0.5, "rewards/format/mean": 1.0, "rewards/x/std": 0.1}]
    >>> [(s.label, s.y) for s in reward_series(rows)]
    [('total', [0.5]), ('format', [1.0])]
    """
    components = dict.fromkeys(k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean"))
    found = [step_series(rows, "reward", "total")]
    found += [step_series(rows, key, key.split("/")[1]) for key in components]
    return [s for s in found if s is not None]


def stage_boundaries(manifest: dict, rows: Sequence[dict]) -> list[Boundary]:
    """Each started stage's start, labelled by its level: from run.json, else `global_step - stage_step` of a row.

    >>> manifest = {"stages": [{"index": 1, "level_label": "2ppl", "global_step_start": 0},
    ...                        {"index": 2, "level_label": "3steps", "global_step_start": 10}, {"index": 3}]}
    >>> stage_boundaries(manifest, [{"stage": 4, "level": "2-6ppl", "stage_step": 1, "global_step": 31}])
    [Boundary(step=0.5, label='2ppl'), Boundary(step=10.5, label='3steps'), Boundary(step=30.5, label='2-6ppl')]
    """
    starts: dict[int, tuple[int, str]] = {}
    for row in rows:
        step, stage_step = as_number(row.get("global_step")), as_number(row.get("stage_step"))
        if step is not None and stage_step is not None and row.get("stage") not in starts:
            label = row.get("level") or row.get("stage_name") or row.get("stage")
            starts[row.get("stage")] = (int(step - stage_step), str(label))
    for stage in stage_records(manifest):
        if stage.global_step_start is not None:
            label = stage.level_label or stage.name or stage.index
            kind = "" if stage.kind_facts.default else f" {stage.kind_facts.label}"  # a cold start is not GRPO
            starts[stage.index] = (int(stage.global_step_start), f"{label}{kind}")
    return [Boundary(step + 0.5, label) for step, label in sorted(starts.values())]


def validation_points(rows: Sequence[dict], key: str) -> list[Series]:
    """`key` of each validation at its global step, one series per level; a rate with its 95% interval.

    >>> rows = [{"stage": 0, "global_step": 0, "level": "3ppl", "mean_tokens": 40.0},
    ...         {"stage": 0, "global_step": 0, "level": "2ppl", "mean_tokens": 30.0},
    ...         {"stage": 1, "global_step": 10, "level": "2ppl", "mean_tokens": 25.0}]
    >>> [(s.label, s.x, s.y) for s in validation_points(rows, "mean_tokens")]
    [('2ppl', [0, 10], [30.0, 25.0]), ('3ppl', [0], [40.0])]
    """
    validations = sorted(_validations(rows, key).items())
    found = []
    for level in sorted({level for _, cells in validations for level in cells}, key=level_order):
        points = [(step, *cells[level]) for step, cells in validations if level in cells]
        values = [value for _, value, _ in points]
        low, high = intervals(values, [n for _, _, n in points]) if key in RATES else (None, None)
        found.append(Series(level, [step for step, _, _ in points], values, low, high))
    return found


def intervals(values: Sequence[float | None], ns: Sequence[int | None]) -> tuple[list, list]:
    """The 95% Wilson interval of each rate (None where the rate or its n is unknown).

    >>> intervals([0.5, 0.5, None], [4, None, 4])
    ([0.15, None, None], [0.85, None, None])
    """
    bounds = [tuple(round(b, 4) for b in wilson_interval(v, n)) if v is not None and n else (None, None)
              for v, n in zip(values, ns, strict=True)]
    return [b[0] for b in bounds], [b[1] for b in bounds]


def stage_grid(rows: Sequence[dict], key: str, planned: Sequence[tuple[int, str]] = (),
               counted: Sequence[str] = ()) -> StageGrid:
    """`key` after each stage for each level, baseline first; `planned` ((index, name)): stages to come, as None.

    >>> rows = [{"stage": 1, "stage_name": "2ppl", "level": "2ppl", "accuracy": 0.5},
    ...         {"stage": 0, "stage_name": "baseline", "level": "2ppl", "accuracy": 0.1},
    ...         {"stage": 0, "stage_name": "baseline", "level": "3ppl", "accuracy": 0.0}]
    >>> grid = stage_grid(rows, "accuracy", planned=[(1, "2ppl"), (2, "3ppl")])
    >>> grid.stages, grid.levels, grid.values
    (['baseline', '2ppl', '3ppl'], ['2ppl', '3ppl'], {'2ppl': [0.1, 0.5, None], '3ppl': [0.0, None, None]})
    """
    names = dict(planned)
    cells: dict[tuple[int, str], tuple[float | None, int | None]] = {}
    for row in rows:
        if row.get("stage") is None or row_level(row) is None:
            continue
        index = int(row["stage"])
        names.setdefault(index, row.get("stage_name") or (BASELINE if index == 0 else f"stage {index}"))
        cells[index, row_level(row)] = (as_number(row.get(key)), trials(row, key, counted))
    order = sorted(names)
    levels = sorted({level for _, level in cells}, key=level_order)
    values = {level: [cells.get((index, level), (None, None))[0] for index in order] for level in levels}
    counts = {level: [cells.get((index, level), (None, None))[1] for index in order] for level in levels}
    return StageGrid([str(names[i]) for i in order], levels, values, counts)


def planned_stages(manifest: dict) -> list[tuple[int, str]]:
    """(index, name) of every stage in run.json, baseline (0) first."""
    stages = [s for s in stage_records(manifest) if s.index is not None]
    return [(0, BASELINE), *((int(s.index), str(s.index if s.name is None else s.name)) for s in stages)]


def _validations(rows: Sequence[dict], key: str = "accuracy") -> dict[int, dict[str, tuple[float, int | None]]]:
    """Each validation's `key` by global step, then level: (value, its trials)."""
    found: dict[int, dict[str, tuple[float, int | None]]] = {}
    for row in rows:
        step, value = as_number(row.get("global_step")), as_number(row.get(key))
        if step is not None and value is not None and row_level(row) is not None:
            found.setdefault(int(step), {})[row_level(row)] = (value, trials(row, key))
    return found


def common_levels(runs: Sequence[Sequence[dict]]) -> list[str]:
    """The subsets validated at every validation of every run (a mean over others would move with the plan).

    >>> near = [{"global_step": 0, "level": l, "accuracy": 0.0} for l in ("2ppl", "3ppl", "4ppl")]
    >>> near += [{"global_step": 5, "level": l, "accuracy": 0.5} for l in ("2ppl", "3ppl")]
    >>> common_levels([near]), common_levels([near, [{"global_step": 0, "level": "4ppl", "accuracy": 0.2}]])
    (['2ppl', '3ppl'], [])
    """
    validations = [levels.keys() for rows in runs for levels in _validations(rows).values()]
    if not validations:
        return []
    return sorted(set.intersection(*map(set, validations)), key=level_order)


def accuracy_curve(rows: Sequence[dict], label: str, levels: Sequence[str]) -> Series | None:
    """Mean accuracy over `levels` at every validation (None where one was left out: a gap), with the 95% interval
    of their puzzles together; None when no validation has them all.

    >>> rows = [{"stage": 0, "global_step": 0, "level": "2ppl", "accuracy": 0.1, "n": 100},
    ...         {"stage": 0, "global_step": 0, "level": "3ppl", "accuracy": 0.0, "n": 100},
    ...         {"stage": 1, "global_step": 10, "level": "2ppl", "accuracy": 0.5, "n": 100},
    ...         {"stage": 1, "global_step": 10, "level": "3ppl", "accuracy": 0.3, "n": 100}]
    >>> curve = accuracy_curve(rows, "kk_ladder", ["2ppl", "3ppl"])
    >>> curve, curve.low, curve.high
    (Series(label='kk_ladder', x=[0, 10], y=[0.05, 0.4]), [0.0274, 0.3346], [0.0896, 0.4692])
    >>> rows = [{"global_step": s, "level": l, "accuracy": a, "n": 4}
    ...         for s, l, a in [(0, "2ppl", 0.0), (0, "4ppl", 0.0), (5, "2ppl", 0.5), (9, "4ppl", 0.25)]]
    >>> curve = accuracy_curve(rows, "run", ["4ppl"])
    >>> curve, curve.low
    (Series(label='run', x=[0, 5, 9], y=[0.0, None, 0.25]), [0.0, None, 0.0456])
    """
    validations = sorted(_validations(rows).items())
    cells = [[found[level] for level in levels] if levels and all(level in found for level in levels) else None
             for _, found in validations]
    if not any(cells):
        return None
    means = [None if cell is None else sum(v for v, _ in cell) / len(cell) for cell in cells]
    totals = [sum(n for _, n in cell) if cell and all(n for _, n in cell) else None for cell in cells]
    return Series(label, [step for step, _ in validations], means, *intervals(means, totals))


def accuracy_panels(runs: Sequence[tuple[str, Sequence[dict]]]) -> list[tuple[str, list[Series]]]:
    """(title, one curve per run) of (label, validation rows): the mean over `common_levels`, else one per subset."""
    levels = common_levels([rows for _, rows in runs])
    if levels:
        everything = {row_level(r) for _, rows in runs for r in rows if row_level(r) is not None}
        left = sorted(everything - set(levels), key=level_order)
        out = f"; left out, not validated at every point: {', '.join(left)}" if left else ""
        curves = [accuracy_curve(rows, label, levels) for label, rows in runs]
        return [(f"mean validation accuracy over {', '.join(levels)}{out}", [c for c in curves if c is not None])]
    every = sorted({level for _, rows in runs for found in _validations(rows).values() for level in found},
                   key=level_order)
    return [(f"{level} validation accuracy (a gap: not validated there)",
             [c for label, rows in runs if (c := accuracy_curve(rows, label, [level])) is not None]) for level in every]
