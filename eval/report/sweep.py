"""A Hydra multirun's report: final accuracy against the swept parameters, the jobs' curves, every job.

A swept seed is averaged over, never plotted against: the spread between seeds is the run-to-run noise a
difference between settings must beat, so jobs that differ only in their seed are summarised as mean, standard
deviation (sample, n - 1) and min..max per stage and subset.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from core.rundir.files import BASELINE
from core.rundir.records import level_order, row_level
from core.stats import rate_text, wilson_interval
from eval.report import jobs as js
from eval.report import series as rs
from eval.report.blocks import Heading, Image, Table, Text, code, fmt, md_escape, short_number
from eval.report.plots import CURVES_NOTE, plot_sweep_curves, plot_sweep_heatmaps, plot_sweep_lines

Measure = tuple[str, Callable[[js.Job], float | None], Callable[[js.Job], int | None]]


def _accuracy_measures(jobs: Sequence[js.Job]) -> list[Measure]:
    """(label, job -> value, job -> its puzzles): the mean final accuracy over `jobs.shared_levels`, then each
    subset's."""
    levels = sorted({level for job in jobs for level in job.final_accuracy}, key=level_order)
    mean = ("mean", *js.mean_measure(js.shared_levels(jobs)))
    return [mean, *((level, *js.subset_measure(level)) for level in levels)]


def mean_note(jobs: Sequence[js.Job]) -> str:
    """Which subsets "mean" is over (plain text: level names come from the jobs' folders)."""
    return f"mean: over {', '.join(js.shared_levels(jobs)) or 'no subset every finished job has'}"


BEST = "best"  # the mark of the job with the best objective, in its table row and its curves' legend
SEED_KEYS = ("seed",)  # the override keys that name a seed


def _jobs_table(jobs: Sequence[js.Job], params: list[str], ranked: bool = False, best: js.Job | None = None) -> Table:
    """One row per job: its swept values, how far it got, its objective and final accuracies; `best` marked."""
    levels = sorted({level for job in jobs for level in job.final_accuracy}, key=level_order)
    mean, puzzles = js.mean_measure(js.shared_levels(jobs))
    if ranked:  # best first; unfinished jobs last
        jobs = sorted(jobs, key=lambda j: (mean(j) is None, -(mean(j) or 0.0)))
    rows = [[f"{job.name} ({BEST})" if job is best else job.name,
             *(short_number(fmt(job.overrides.get(p))) for p in params), job.status,
             f"{job.stages_done}/{job.stages_total}", fmt(job.objective), rate_text(mean(job), puzzles(job)),
             *(rate_text(job.final_accuracy.get(level), job.final_trials.get(level)) for level in levels),
             fmt(job.error)]
            for job in jobs]
    return Table(["job", *params, "status", "stages", "objective", "mean acc", *levels,
                  "error"], rows)


def _heatmap(jobs: Sequence[js.Job], rows: str, cols: str, measure: Measure) -> tuple:
    """(title, row values, column values, values, notes) of one measure over two parameters; a cell's note: a lone
    job's 95% Wilson interval, or how many jobs (seeds) its mean is over."""
    label, value, trials = measure
    row_values, col_values, matrix = js.param_grid(jobs, rows, cols, value)
    notes = [[_cell_note([job for job in jobs if value(job) is not None and str(job.overrides.get(rows)) == r
                          and str(job.overrides.get(cols)) == c], value, trials) for c in col_values]
             for r in row_values]
    shown = ([short_number(v) for v in values] for values in (row_values, col_values))
    return f"{label} final accuracy", *shown, matrix, notes


def _cell_note(cell: Sequence[js.Job], value, trials) -> str:
    if len(cell) > 1:
        return f"mean of {len(cell)}"
    if not cell or not trials(cell[0]):
        return ""
    low, high = wilson_interval(value(cell[0]), trials(cell[0]))
    return f"[{low:.2f}, {high:.2f}]"


def _sweep_accuracy(jobs: Sequence[js.Job], params: list[str], out_dir: Path, best: js.Job | None = None) -> list:
    measures = _accuracy_measures(jobs)
    if not any(job.final_accuracy for job in jobs):
        return [Text("no job has finished its last stage: nothing to plot yet", True)]
    if len(params) == 1:
        lines = [js.param_line(jobs, params[0], value, label, trials) for label, value, trials in measures]
        return [Image(plot_sweep_lines(lines, params[0], out_dir / "sweep_accuracy.png"),
                      f"final accuracy vs {params[0]} ({mean_note(jobs)}); bars: a lone job's 95% Wilson "
                      "interval, or min..max over the jobs sharing the value (seeds)")]
    if len(params) == 2:
        grids = [_heatmap(jobs, params[0], params[1], measure) for measure in measures]
        image = plot_sweep_heatmaps(grids, params[0], params[1], out_dir / "sweep_accuracy.png")
        return [Image(image, f"final accuracy over {params[0]} x {params[1]} ({mean_note(jobs)}), with a lone "
                             "job's 95% Wilson interval under its value")]
    if not params:
        return [Text("no swept parameter to plot against but the seed: see the seeds table below", True)]
    return [Text(f"{len(params)} swept parameters: jobs ranked by mean final accuracy ({md_escape(mean_note(jobs))}) "
                 "instead of a plot"),
            _jobs_table(jobs, params, ranked=True, best=best)]


def job_label(overrides: dict[str, str], params: Sequence[str], name: str) -> str:
    """A job's legend entry: its values of the swept parameters, else its number.

    >>> job_label({"format": "0.3745401188473625", "seed": "1"}, ["format"], "3"), job_label({}, [], "3")
    ('format=0.375', 'job 3')
    """
    parts = [f"{p}={short_number(overrides[p])}" for p in params if p in overrides]
    return ", ".join(parts) if parts else f"job {name}"


def job_labels(jobs: Sequence[js.Job], params: list[str], best: js.Job | None) -> list[str]:
    """Each job's legend entry, the best job's marked."""
    return [job_label(job.overrides, params, job.name) + (f" ({BEST})" if job is best else "") for job in jobs]


def _sweep_curves(jobs: Sequence[js.Job], params: list[str], out_dir: Path, best: js.Job | None = None) -> list:
    """Every job's accuracy, training reward and length curves overlaid, the best job's drawn thicker."""
    runs = list(zip(job_labels(jobs, params, best), (rs.load_run(job.path) for job in jobs), strict=True))
    accuracy = rs.accuracy_panels([(label, run.validation) for label, run in runs])
    reward = [s for label, run in runs if (s := rs.step_series(run.steps, "reward", label)) is not None]
    length = [s for label, run in runs if (s := rs.step_series(run.steps, "completions/mean_length", label))
              is not None]
    if not any(lines for _, lines in accuracy) and not length and not reward:
        return [Text("no job has validated a stage or logged a step yet: curves skipped", True)]
    marked = job_labels([best], params, best)[0] if best is not None else None
    image = plot_sweep_curves(accuracy, length, out_dir / "sweep_curves.png", reward=reward, best=marked)
    best_words = f"; thicker: the best job, {job_label(best.overrides, params, best.name)}" if best else ""
    return [Image(image, f"one colour per job: {CURVES_NOTE}; then training reward and mean length per "
                         f"step{best_words}")]


def best_words(best: js.Job | None, params: list[str], direction: str) -> str:
    """The summary's line on the best job: its number, objective and swept values."""
    if best is None:
        return "**best job** none yet (no job has finished with an objective)"
    values = ", ".join(code(f"{p}={short_number(best.overrides.get(p))}") for p in params if p in best.overrides)
    return (f"**best job** {md_escape(best.name)} ({'lowest' if direction == 'minimize' else 'highest'} objective "
            f"{best.objective:.3f}){': ' + values if values else ''}")


def sweep_report(sweep_dir: Path, out_dir: Path) -> tuple[str, list]:
    """The title and blocks of a multirun's report; draws its PNG into `out_dir`."""
    jobs, linked = js.load_sweep(sweep_dir), js.linked_jobs(sweep_dir)
    skipped = [Text(md_escape(f"skipped {', '.join(linked)}: a link, not a job folder of this sweep"), True)] \
        if linked else []
    if not jobs:
        return f"Sweep report: {sweep_dir.name}", [Text("no job directories (<sweep>/<n>/) yet", True), *skipped]
    params = js.swept_params(jobs)
    plotted = [p for p in params if p not in SEED_KEYS]  # a seed is averaged over, not plotted against
    counts = Counter(job.status for job in jobs)
    seed = next((p for p in params if p in SEED_KEYS), None)
    summary = (f"**jobs** {len(jobs)} ({', '.join(f'{n} {status}' for status, n in sorted(counts.items()))})"
               f" · **swept** {', '.join(code(p) for p in params) or 'nothing'}"
               + (f" · **averaged over** {code(seed)}" if seed else ""))
    direction = js.sweep_direction(sweep_dir)
    best = js.best_job(jobs, direction)
    blocks = [Text(summary), Text(best_words(best, params, direction)), *skipped,
              Heading("Final accuracy against the swept parameters"),
              *_sweep_accuracy(jobs, plotted, out_dir, best), *seed_blocks(jobs, params, seed),
              Heading("The jobs compared: accuracy after each stage, training reward and response length"),
              *_sweep_curves(jobs, params, out_dir, best), Heading("Every job"), _jobs_table(jobs, params, best=best),
              Text(md_escape(f"mean acc: {mean_note(jobs)}")),
              Text(f"one job's curves: {code(f'python -m eval.report {sweep_dir}/<job>')}")]
    return f"Sweep report: {sweep_dir.name}", blocks


def spread_text(values: Sequence[float]) -> str:
    """Mean ± standard deviation [min, max] over seeds.

    >>> spread_text([0.4, 0.5, 0.6]), spread_text([0.25])
    ('0.500 ± 0.100 [0.40, 0.60] 3 seeds', '0.250 (1 seed)')
    """
    if len(values) == 1:
        return f"{values[0]:.3f} (1 seed)"
    return (f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f} "
            f"[{min(values):.2f}, {max(values):.2f}] {len(values)} seeds")


def seed_table(jobs: Sequence[js.Job]) -> Table:
    """Stage rows x subset columns: the accuracy's mean ± sd [min, max] over the group's seeds."""
    cells: dict[tuple[int, str], list[float]] = {}
    names: dict[int, str] = {}
    for job in jobs:
        found = {}  # (stage, level) -> (stage name, accuracy): a job's last row of each counts once
        for row in rs.load_run(job.path).validation:
            stage, level, accuracy = rs.as_number(row.get("stage")), row_level(row), rs.as_number(row.get("accuracy"))
            if stage is not None and level is not None and accuracy is not None:
                name = row.get("stage_name") or (BASELINE if stage == 0 else f"stage {int(stage)}")
                found[int(stage), level] = (str(name), accuracy)
        for (stage, level), (name, accuracy) in found.items():
            cells.setdefault((stage, level), []).append(accuracy)
            names.setdefault(stage, name)
    levels = sorted({level for _, level in cells}, key=level_order)
    rows = [[names[stage], *(spread_text(cells[stage, level]) if (stage, level) in cells else "-"
                             for level in levels)]
            for stage in sorted(names)]
    return Table(["after stage", *levels], rows)


def seed_blocks(jobs: Sequence[js.Job], params: Sequence[str], seed: str | None) -> list:
    """A section per group of jobs that share every swept value but the `seed`: their accuracy over the seeds."""
    if seed is None:
        return []
    blocks: list = [Heading(f"Over seeds ({seed}): mean ± sd [min, max] per stage and subset"),
                    Text("Each job's accuracy counts once; the spread between seeds is the noise a difference "
                         "between settings must beat. Stages a seed has not validated yet are left out of its "
                         "cell (the count says how many seeds it holds).")]
    groups: dict[tuple, list[js.Job]] = {}
    for job in jobs:
        groups.setdefault(tuple((p, job.overrides.get(p)) for p in params if p not in SEED_KEYS), []).append(job)
    for key, group in groups.items():
        setting = ", ".join(code(f"{p}={short_number(v)}") for p, v in key) or "every job"
        seeds = md_escape(", ".join(str(job.overrides.get(seed)) for job in group))
        blocks += [Text(f"**{setting}**: seeds {seeds} (jobs {md_escape(', '.join(job.name for job in group))})"),
                   seed_table(group)]
    return blocks
