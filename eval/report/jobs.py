"""A Hydra multirun's job folders -> plain records and tables for the sweep report (no matplotlib here). A job may
have failed before writing anything but `error.txt`, or still be running: what it lacks is None or empty, never an
error. A job folder is read without following a link out of it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.rundir.files import ERROR, RUN_JSON, VALIDATION, load_file, read_inside, read_mapping, scan_jsonl
from core.rundir.records import Status, final_accuracy, level_order, stage_records
from core.stats import wilson_interval
from eval.metrics import trials
from eval.report.blocks import short_number
from eval.report.series import Series, as_number, rows_at

# error.txt of a run of many processes starts with the failing rank (train/failures.py record_error)
RANK_HEAD = re.compile(r"rank \d+ of \d+: ")


@dataclass
class Job:
    """One job of a Hydra multirun: its overrides, how far it got, and its final validation."""

    name: str
    path: Path
    overrides: dict[str, str]
    status: str
    stages_done: int
    stages_total: int
    final_accuracy: dict[str, float]  # by level
    objective: float | None
    error: str | None
    final_trials: dict[str, int] = field(default_factory=dict)  # puzzles behind each final accuracy


def error_line(text: str) -> str:
    """The exception line of a traceback (error.txt), else the first non-empty line; a failing rank's head line as is.

    >>> error_line("Traceback (most recent call last):\\n  File \\"x.py\\"\\n    f()\\nValueError: bad\\n")
    'ValueError: bad'
    >>> error_line("\\nconfig error: eval.n must be > 0\\n")
    'config error: eval.n must be > 0'
    >>> error_line("rank 1 of 2: ValueError: bad\\n\\nTraceback (most recent call last):\\n  f()\\nValueError: bad\\n")
    'rank 1 of 2: ValueError: bad'
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and RANK_HEAD.match(lines[0]):
        return lines[0].strip()
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
    manifest = read_mapping(job_dir / RUN_JSON, inside=job_dir)
    overrides_list = load_file(job_dir / ".hydra" / "overrides.yaml", inside=job_dir)
    overrides = parse_overrides(overrides_list if isinstance(overrides_list, list) else [])
    error_text = read_inside(job_dir, job_dir / ERROR)
    error = error_line(error_text.decode(errors="replace")) if error_text is not None else None
    status = "failed" if error is not None else manifest.get("status", "not started")
    stages = stage_records(manifest)
    accuracy = final_accuracy(manifest)
    value = as_number(manifest.get("objective")) if status == Status.DONE else None  # what the job returned
    return Job(job_dir.name, job_dir, overrides, status, sum(s.done for s in stages), len(stages), accuracy, value,
               error, final_trials(scan_jsonl(job_dir / VALIDATION, inside=job_dir).rows,
                                   stages[-1].index if stages else None))


def sweep_direction(sweep_dir: Path) -> str:
    """Optuna's `direction` in multirun.yaml (maximize | minimize), else maximize (the objective is an accuracy)."""
    multirun = read_mapping(sweep_dir / "multirun.yaml", inside=sweep_dir)
    hydra = multirun.get("hydra") if isinstance(multirun.get("hydra"), dict) else {}
    sweeper = hydra.get("sweeper") if isinstance(hydra.get("sweeper"), dict) else {}
    return "minimize" if sweeper.get("direction") == "minimize" else "maximize"


def best_job(jobs: Sequence[Job], direction: str = "maximize") -> Job | None:
    """The finished job with the best objective (the first of equals), None when no job has one.

    >>> jobs = [Job(str(i), Path("."), {}, "done", 1, 1, {}, value, None) for i, value in enumerate([0.2, 0.5, None])]
    >>> best_job(jobs).name, best_job(jobs, "minimize").name, best_job(jobs[2:])
    ('1', '0', None)
    """
    scored = [job for job in jobs if job.objective is not None]
    sign = -1.0 if direction == "minimize" else 1.0
    return max(scored, key=lambda job: sign * job.objective, default=None)


def final_trials(rows: Sequence[dict], last_stage: int | None) -> dict[str, int]:
    """The puzzles behind each subset's accuracy after the last stage (run.json does not record them).

    >>> final_trials([{"stage": 0, "level": "2ppl", "n": 4}, {"stage": 2, "level": "2ppl", "n": 8, "puzzles": 4}], 2)
    {'2ppl': 4}
    """
    return {level: n for level, row in rows_at(rows, last_stage).items() if (n := trials(row, "accuracy")) is not None}


def load_sweep(sweep_dir: Path) -> list[Job]:
    """Every job directory (`<sweep>/<n>/`) of a multirun, in job order; a link is no job of it (`linked_jobs`)."""
    dirs = [d for d in sweep_dir.iterdir() if d.name.isdigit() and not d.is_symlink() and d.is_dir()]
    return [load_job(d) for d in sorted(dirs, key=lambda d: int(d.name))]


def linked_jobs(sweep_dir: Path) -> list[str]:
    """The job names (`<sweep>/<n>`) that are links: one followed would show a folder from elsewhere as a job."""
    return sorted((d.name for d in sweep_dir.iterdir() if d.name.isdigit() and d.is_symlink()), key=int)


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


def shared_levels(jobs: Sequence[Job]) -> list[str]:
    """The subsets every job with a final validation has: a mean over these compares like with like.

    >>> a = Job("0", Path("0"), {}, "done", 1, 1, {"2ppl": 0.5, "3ppl": 0.1}, None, None)
    >>> shared_levels([a, Job("1", Path("1"), {}, "done", 1, 1, {"2ppl": 0.2}, None, None)])
    ['2ppl']
    """
    finals = [set(job.final_accuracy) for job in jobs if job.final_accuracy]
    return sorted(set.intersection(*finals), key=level_order) if finals else []


Measure = Callable[[Job], tuple[float | None, int | None]]  # a job's value, and the puzzles behind it


def mean_measure(levels: Sequence[str]) -> Measure:
    """job -> (its mean final accuracy over `levels`, the puzzles of all of them together); None where one lacks.

    >>> measure = mean_measure(["2ppl", "3ppl"])
    >>> measure(Job("0", Path("0"), {}, "done", 1, 1, {"2ppl": 0.5, "3ppl": 0.1, "4ppl": 0.0}, None, None,
    ...             {"2ppl": 10, "3ppl": 10}))
    (0.3, 20)
    """
    def measure(job: Job) -> tuple[float | None, int | None]:
        found = [job.final_accuracy.get(level) for level in levels]
        counts = [job.final_trials.get(level) for level in levels]
        return (_mean(found) if levels and None not in found else None,
                sum(counts) if counts and all(counts) else None)

    return measure


def subset_measure(level: str) -> Measure:
    """job -> (final accuracy of subset `level`, its puzzles)."""
    return lambda job: (job.final_accuracy.get(level), job.final_trials.get(level))


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


def _measured(jobs: Sequence[Job], measure: Measure, values: dict) -> list[tuple[float, int | None]]:
    """(value, puzzles) of the jobs with these override `values` that have one."""
    return [(v, n) for job in jobs if all(job.overrides.get(k) == x for k, x in values.items())
            for v, n in (measure(job),) if v is not None]


def param_line(jobs: Sequence[Job], param: str, measure: Measure, label: str) -> Series:
    """`measure` (mean over the jobs that share a value) against one swept parameter's values, with bars: a lone
    job's 95% Wilson interval, or the min..max of several (seeds: the noise that matters).

    >>> jobs = [Job(str(i), Path("."), {"w": w}, "done", 1, 1, {"2ppl": acc}, None, None, {"2ppl": 100})
    ...         for i, (w, acc) in enumerate([("0", 0.5), ("1", 0.2), ("1", 0.4)])]
    >>> line = param_line(jobs, "w", subset_measure("2ppl"), "2ppl")
    >>> line.x, [round(y, 2) for y in line.y], line.low, line.high  # w=0: one job (Wilson); w=1: two (spread)
    (['0', '1'], [0.5, 0.3], [0.4038, 0.2], [0.5962, 0.4])
    """
    xs = value_order(job.overrides.get(param) for job in jobs)
    cells = [_measured(jobs, measure, {param: x}) for x in xs]
    bars = [tuple(round(b, 4) for b in wilson_interval(*cell[0])) if len(cell) == 1 and cell[0][1] else
            (min(v for v, _ in cell), max(v for v, _ in cell)) if len(cell) > 1 else (None, None) for cell in cells]
    ys = [_mean([v for v, _ in cell]) for cell in cells]
    lows, highs = [low for low, _ in bars], [high for _, high in bars]
    return Series(label, [short_number(x) for x in xs], ys, lows, highs)


def param_grid(jobs: Sequence[Job], rows: str, cols: str, measure: Measure):
    """(row values, column values (shortened), matrix, notes) of `measure` over two swept parameters (None: no job
    there); a note: a lone job's 95% Wilson interval, or how many jobs (seeds) the mean is over.

    >>> jobs = [Job(str(i), Path("."), {"a": a, "b": b}, "done", 1, 1, {"2ppl": acc}, None, None, {"2ppl": 4})
    ...         for i, (a, b, acc) in enumerate([("0", "1", 0.5), ("1", "1", 0.25), ("0", "2", 1.0), ("0", "2", 0.5)])]
    >>> param_grid(jobs, "a", "b", mean_measure(["2ppl"]))
    (['0', '1'], ['1', '2'], [[0.5, 0.75], [0.25, None]], [['[0.15, 0.85]', 'mean of 2'], ['[0.05, 0.70]', '']])
    """
    row_values = value_order(job.overrides.get(rows) for job in jobs)
    col_values = value_order(job.overrides.get(cols) for job in jobs)
    cells = [[_measured(jobs, measure, {rows: r, cols: c}) for c in col_values] for r in row_values]
    matrix = [[_mean([v for v, _ in cell]) for cell in row] for row in cells]
    return ([short_number(v) for v in row_values], [short_number(v) for v in col_values], matrix,
            [[_note(cell) for cell in row] for row in cells])


def _note(cell: list[tuple[float, int | None]]) -> str:
    if len(cell) > 1:
        return f"mean of {len(cell)}"
    if not cell or not cell[0][1]:
        return ""
    low, high = wilson_interval(*cell[0])
    return f"[{low:.2f}, {high:.2f}]"
