"""Run and sweep directories -> plain series and tables for the report (no matplotlib here).

Everything here tolerates a run that is still being written: a missing file is an empty list, a
torn jsonl line is skipped and counted, a missing key is a missing series. The plots
(`eval.report_plots`) and the documents (`eval.report`) only draw and format what these return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.checks import is_number
from core.rundir import (
    BASELINE,
    CONFIG,
    METRICS,
    RUN_JSON,
    VALIDATION,
    Status,
    final_accuracy,
    load_file,
    objective,
    read_mapping,
    scan_jsonl,
    stage_records,
)


@dataclass(frozen=True)
class Series:
    """One line of a plot: `y[i]` at `x[i]`."""

    label: str
    x: list
    y: list


@dataclass(frozen=True)
class Boundary:
    """Where a stage starts on the global-step axis (half a step before its first: the line falls between
    two stages' steps, never on one), and its ppl label ("2ppl", "2-6ppl")."""

    step: float
    label: str


@dataclass(frozen=True)
class StageGrid:
    """One validation metric as stage (columns: baseline first) x subset (one row per ppl)."""

    stages: list[str]
    ppls: list[int]
    values: dict[int, list]


@dataclass
class RunData:
    """What a run directory holds, read once; `notes` says what could not be read."""

    path: Path
    manifest: dict
    config: dict
    steps: list[dict]
    validation: list[dict]
    notes: list[str] = field(default_factory=list)


# --- reading --------------------------------------------------------------------------------------


def load_run(run_dir: Path) -> RunData:
    """Read run.json, config.yaml, metrics.jsonl (step rows) and validation.jsonl of `run_dir`.

    The run may be writing right now: a torn line (anywhere) is skipped and counted, never repaired.
    """
    metrics, validation = scan_jsonl(run_dir / METRICS), scan_jsonl(run_dir / VALIDATION)
    # per-step rows only: a stage's end-of-training summary line (kind "summary") has no step metrics
    steps = [r for r in metrics.rows if r.get("kind", "summary" if "train_runtime" in r else "step") == "step"]
    run = RunData(run_dir, read_mapping(run_dir / RUN_JSON), read_mapping(run_dir / CONFIG), steps,
                  validation.rows)
    for name, scan in ((METRICS, metrics), (VALIDATION, validation)):
        if scan.damaged:
            run.notes.append(f"{name}: skipped {len(scan.damaged)} unreadable line(s) (torn while the run writes)")
    if not run.manifest:
        run.notes.append("run.json is missing or unreadable: stage boundaries come from metrics.jsonl")
    return run


# --- run series -----------------------------------------------------------------------------------


def as_number(value) -> float | None:
    """`value` as a finite float, or None (missing, text, NaN, inf)."""
    return float(value) if is_number(value, finite=True) else None


def step_series(rows: Iterable[dict], key: str, label: str | None = None) -> Series | None:
    """`key` per global step over the step rows that have it as a number; None when no row does.

    >>> rows = [{"global_step": 2, "kl": 0.5}, {"global_step": 1, "kl": 0.1}, {"global_step": 3}]
    >>> step_series(rows, "kl")
    Series(label='kl', x=[1, 2], y=[0.1, 0.5])
    >>> step_series(rows, "entropy") is None
    True
    """
    points = {}
    for row in rows:
        step, value = as_number(row.get("global_step")), as_number(row.get(key))
        if step is not None and value is not None:
            points[int(step)] = value
    points = dict(sorted(points.items()))
    if not points:
        return None
    return Series(label or key, list(points), list(points.values()))


def step_band(rows: Sequence[dict], low: str, high: str) -> tuple[Series, Series] | None:
    """(low, high) per step over the rows that have both, so the two share their x (a fill needs that).

    >>> step_band([{"global_step": 1, "lo": 1, "hi": 3}, {"global_step": 2, "hi": 4}], "lo", "hi")
    (Series(label='lo', x=[1], y=[1.0]), Series(label='hi', x=[1], y=[3.0]))
    """
    both = [r for r in rows if as_number(r.get(low)) is not None and as_number(r.get(high)) is not None]
    if not both:
        return None
    return step_series(both, low), step_series(both, high)


def reward_series(rows: Sequence[dict]) -> list[Series]:
    """The total reward, then each component's mean (`rewards/<name>/mean`), in the order logged.

    >>> rows = [{"global_step": 1, "reward": 0.5, "rewards/format_reward/mean": 1.0, "rewards/x/std": 0.1}]
    >>> [(s.label, s.y) for s in reward_series(rows)]
    [('total', [0.5]), ('format_reward', [1.0])]
    """
    components = dict.fromkeys(k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean"))
    found = [step_series(rows, "reward", "total")]
    found += [step_series(rows, key, key.split("/")[1]) for key in components]
    return [s for s in found if s is not None]


def stage_boundaries(manifest: dict, rows: Sequence[dict]) -> list[Boundary]:
    """Each stage's start (its first global step - 0.5), labelled by its ppl: from run.json, else from metrics rows.

    A metrics row's stage starts after `global_step - stage_step`, which covers a run.json that is
    missing; stages that have not started (no start anywhere) get no boundary.

    >>> manifest = {"stages": [{"index": 1, "ppl_label": "2", "global_step_start": 0},
    ...                        {"index": 2, "ppl_label": "3", "global_step_start": 10}, {"index": 3}]}
    >>> stage_boundaries(manifest, [{"stage": 4, "ppl": "2-6", "stage_step": 1, "global_step": 31}])
    [Boundary(step=0.5, label='2ppl'), Boundary(step=10.5, label='3ppl'), Boundary(step=30.5, label='2-6ppl')]
    """
    starts: dict[int, tuple[int, str]] = {}
    for row in rows:
        step, stage_step = as_number(row.get("global_step")), as_number(row.get("stage_step"))
        if step is not None and stage_step is not None and row.get("stage") not in starts:
            label = row.get("ppl") or row.get("stage_name") or row.get("stage")
            starts[row.get("stage")] = (int(step - stage_step), f"{label}ppl")
    for stage in stage_records(manifest):
        if stage.global_step_start is not None:
            label = stage.ppl_label or stage.name or stage.index
            kind = " SFT" if stage.kind == "sft" else ""  # a cold start is not a GRPO stage
            starts[stage.index] = (int(stage.global_step_start), f"{label}ppl{kind}")
    return [Boundary(step + 0.5, label) for step, label in sorted(starts.values())]


def validation_points(rows: Sequence[dict], key: str) -> list[Series]:
    """`key` of each validation at its global step (a stage's `global_step_end`), one series per ppl.

    >>> rows = [{"stage": 0, "global_step": 0, "ppl": 3, "mean_tokens": 40.0},
    ...         {"stage": 0, "global_step": 0, "ppl": 2, "mean_tokens": 30.0},
    ...         {"stage": 1, "global_step": 10, "ppl": 2, "mean_tokens": 25.0}]
    >>> [(s.label, s.x, s.y) for s in validation_points(rows, "mean_tokens")]
    [('2ppl', [0, 10], [30.0, 25.0]), ('3ppl', [0], [40.0])]
    """
    by_ppl: dict[int, dict[int, float]] = {}
    for row in rows:
        value, step = as_number(row.get(key)), as_number(row.get("global_step"))
        if value is not None and step is not None and row.get("ppl") is not None:
            by_ppl.setdefault(int(row["ppl"]), {})[int(step)] = value
    return [Series(f"{ppl}ppl", sorted(points), [points[s] for s in sorted(points)])
            for ppl, points in sorted(by_ppl.items())]


def stage_grid(rows: Sequence[dict], key: str, planned: Sequence[tuple[int, str]] = ()) -> StageGrid:
    """`key` after each stage for each ppl: baseline first, then stages by index.

    `planned` ((index, name) of every stage in run.json) adds columns for stages not validated
    yet, so a table of a run in progress shows what is still to come (as None).

    >>> rows = [{"stage": 1, "stage_name": "2ppl", "ppl": 2, "accuracy": 0.5},
    ...         {"stage": 0, "stage_name": "baseline", "ppl": 2, "accuracy": 0.1},
    ...         {"stage": 0, "stage_name": "baseline", "ppl": 3, "accuracy": 0.0}]
    >>> grid = stage_grid(rows, "accuracy", planned=[(1, "2ppl"), (2, "3ppl")])
    >>> grid.stages, grid.ppls, grid.values
    (['baseline', '2ppl', '3ppl'], [2, 3], {2: [0.1, 0.5, None], 3: [0.0, None, None]})
    """
    names = {index: name for index, name in planned}
    cells: dict[tuple[int, int], float | None] = {}
    for row in rows:
        if row.get("stage") is None or row.get("ppl") is None:
            continue
        index = int(row["stage"])
        names.setdefault(index, row.get("stage_name") or (BASELINE if index == 0 else f"stage {index}"))
        cells[index, int(row["ppl"])] = as_number(row.get(key))
    order = sorted(names)
    ppls = sorted({ppl for _, ppl in cells})
    values = {ppl: [cells.get((index, ppl)) for index in order] for ppl in ppls}
    return StageGrid([names[i] for i in order], ppls, values)


def planned_stages(manifest: dict) -> list[tuple[int, str]]:
    """(index, name) of every stage in run.json, baseline (0) first."""
    stages = [s for s in stage_records(manifest) if s.index is not None]
    return [(0, BASELINE), *((int(s.index), str(s.index if s.name is None else s.name)) for s in stages)]


# --- sweeps ---------------------------------------------------------------------------------------


@dataclass
class Job:
    """One job of a Hydra multirun: its overrides, how far it got, and its final validation."""

    name: str
    path: Path
    overrides: dict[str, str]
    status: str
    stages_done: int
    stages_total: int
    final_accuracy: dict[int, float]
    objective: float | None
    error: str | None


def error_line(text: str) -> str:
    """The exception line of a traceback (error.txt), or the first non-empty line of other text.

    >>> error_line("Traceback (most recent call last):\\n  File \\"x.py\\"\\n    f()\\nValueError: bad\\n")
    'ValueError: bad'
    >>> error_line("\\nconfig error: eval.n must be > 0\\n")
    'config error: eval.n must be > 0'
    """
    lines = [line for line in text.splitlines() if line.strip()]
    last_traceback = max((i for i, line in enumerate(lines) if line.startswith("Traceback")), default=None)
    if last_traceback is None:
        return lines[0].strip() if lines else ""
    # the frames are indented; the first unindented line after them is "<Type>: <message>"
    after = [line for line in lines[last_traceback + 1:] if not line[0].isspace()]
    return after[0].strip() if after else lines[-1].strip()


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """Hydra override strings -> {key: value}, with the +/++/~ prefixes dropped from the keys.

    >>> parse_overrides(["+curriculum=kk_ladder", "reward.weights.format=0.5"])
    {'curriculum': 'kk_ladder', 'reward.weights.format': '0.5'}
    """
    pairs = (str(item).partition("=") for item in items)
    return {key.lstrip("+~"): value for key, eq, value in pairs if eq}


def load_job(job_dir: Path) -> Job:
    """Read one job directory; a failed job (error.txt) may lack every other file."""
    manifest = read_mapping(job_dir / RUN_JSON)
    overrides_list = load_file(job_dir / ".hydra" / "overrides.yaml")
    overrides = parse_overrides(overrides_list if isinstance(overrides_list, list) else [])
    error_file = job_dir / "error.txt"
    error = error_line(error_file.read_text(errors="replace")) if error_file.exists() else None
    status = "failed" if error is not None else manifest.get("status", "not started")
    stages = stage_records(manifest)
    accuracy = final_accuracy(manifest)
    objective_name = str(read_mapping(job_dir / CONFIG).get("objective", "mean_final_accuracy"))
    # run.json records the objective the job returned; older runs did not, so compute it then
    recorded = as_number(manifest.get("objective"))
    value = (objective(objective_name, accuracy) if recorded is None else recorded) if status == Status.DONE else None
    return Job(job_dir.name, job_dir, overrides, status, sum(s.done for s in stages), len(stages), accuracy, value,
               error)


def load_sweep(sweep_dir: Path) -> list[Job]:
    """Every job directory (`<sweep>/<job num>/`) of a multirun, in job order."""
    dirs = [d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()]
    return [load_job(d) for d in sorted(dirs, key=lambda d: int(d.name))]


def swept_params(jobs: Sequence[Job]) -> list[str]:
    """The override keys whose value differs between jobs (fixed command-line overrides are not swept).

    >>> a = Job("0", Path("0"), {"x": "1", "y": "a"}, "done", 1, 1, {}, None, None)
    >>> b = Job("1", Path("1"), {"x": "2", "y": "a"}, "done", 1, 1, {}, None, None)
    >>> swept_params([a, b])
    ['x']
    """
    keys = dict.fromkeys(k for job in jobs for k in job.overrides)
    return [k for k in keys if len({job.overrides.get(k) for job in jobs}) > 1]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def mean_accuracy(job: Job) -> float | None:
    """Mean final accuracy over the validated subsets, or None before the last stage is validated."""
    return _mean(list(job.final_accuracy.values()))


def value_order(values: Iterable[str | None]) -> list[str | None]:
    """Parameter values sorted numerically where they are numbers (so "10" comes after "2").

    >>> value_order(["10", "2", "b", None, "2"])
    ['2', '10', 'b', None]
    """
    def key(value):
        try:
            return (0, float(value), "")
        except (TypeError, ValueError):
            return (1 if value is not None else 2, 0.0, str(value))

    return sorted(set(values), key=key)


def param_line(jobs: Sequence[Job], param: str, measure: Callable[[Job], float | None], label: str) -> Series:
    """`measure` (mean over the jobs that share a value) against one swept parameter's values."""
    xs = value_order(job.overrides.get(param) for job in jobs)
    ys = [_mean([v for job in jobs if job.overrides.get(param) == x and (v := measure(job)) is not None])
          for x in xs]
    return Series(label, [str(x) for x in xs], ys)


def param_grid(jobs: Sequence[Job], rows: str, cols: str, measure: Callable[[Job], float | None]):
    """(row values, column values, matrix) of `measure` over two swept parameters; None: no job there.

    >>> jobs = [Job(str(i), Path("."), {"a": a, "b": b}, "done", 1, 1, {2: acc}, None, None)
    ...         for i, (a, b, acc) in enumerate([("0", "1", 0.5), ("1", "1", 0.25), ("0", "2", 1.0)])]
    >>> param_grid(jobs, "a", "b", mean_accuracy)
    (['0', '1'], ['1', '2'], [[0.5, 1.0], [0.25, None]])
    """
    row_values = value_order(job.overrides.get(rows) for job in jobs)
    col_values = value_order(job.overrides.get(cols) for job in jobs)
    matrix = [[_mean([v for job in jobs if job.overrides.get(rows) == r and job.overrides.get(cols) == c
                      and (v := measure(job)) is not None]) for c in col_values] for r in row_values]
    return [str(v) for v in row_values], [str(v) for v in col_values], matrix
