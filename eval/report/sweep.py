"""Runs side by side: a Hydra multirun's report (final accuracy against the swept parameters, the jobs' curves,
every job), and runs named together (`python -m eval.report RUN_A RUN_B ...`: their config differences, final
accuracy per subset against the first run's, their curves overlaid, accuracy per stage, how each stage ended).

A swept seed is averaged over, never plotted against: the spread between seeds is the run-to-run noise a
difference between settings must beat (mean, sample standard deviation and min..max per stage and subset).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from core.rundir.records import level_order, stage_records
from core.stats import rate_text
from eval.metrics import trials
from eval.report import blocks as rb
from eval.report import jobs as js
from eval.report import series as rs
from eval.report.blocks import Heading, Image, Table, Text, code, fmt, md_escape, short_number
from eval.report.plots import CURVES_NOTE, plot_categories, plot_sweep_curves, plot_sweep_heatmaps
from eval.report.story import end_cells

BEST = "best"  # the mark of the job with the best objective, in its table row and its curves' legend
SEED_KEYS = ("seed",)  # the override keys that name a seed
# Config keys that differ between any two runs on the same machine and say nothing about the method.
NOT_SETTINGS = ("paths.", "hydra.", "run_name", "wandb_id")
MAX_DIFFERENCES = 40
FINAL_LABEL = "final accuracy (after the last stage)"


def mean_note(jobs: Sequence[js.Job]) -> str:
    """Which subsets "mean" is over (plain text: level names come from the jobs' folders)."""
    return f"mean: over {', '.join(js.shared_levels(jobs)) or 'no subset every finished job has'}"


def _jobs_table(jobs: Sequence[js.Job], params: list[str], ranked: bool = False, best: js.Job | None = None) -> Table:
    """One row per job: its swept values, how far it got, its objective and final accuracies; `best` marked."""
    levels = sorted({level for job in jobs for level in job.final_accuracy}, key=level_order)
    mean = js.mean_measure(js.shared_levels(jobs))
    if ranked:  # best first; unfinished jobs last
        jobs = sorted(jobs, key=lambda j: (mean(j)[0] is None, -(mean(j)[0] or 0.0)))
    rows = [[f"{job.name} ({BEST})" if job is best else job.name,
             *(short_number(fmt(job.overrides.get(p))) for p in params), job.status,
             f"{job.stages_done}/{job.stages_total}", fmt(job.objective), rate_text(*mean(job)),
             *(rate_text(job.final_accuracy.get(level), job.final_trials.get(level)) for level in levels),
             fmt(job.error)]
            for job in jobs]
    return Table(["job", *params, "status", "stages", "objective", "mean acc", *levels, "error"], rows)


def _sweep_accuracy(jobs: Sequence[js.Job], params: list[str], out_dir: Path, best: js.Job | None = None) -> list:
    if not any(job.final_accuracy for job in jobs):
        return [Text("no job has finished its last stage: nothing to plot yet", True)]
    levels = sorted({level for job in jobs for level in job.final_accuracy}, key=level_order)
    measures = [("mean", js.mean_measure(js.shared_levels(jobs))), *((lv, js.subset_measure(lv)) for lv in levels)]
    if len(params) == 1:
        lines = [js.param_line(jobs, params[0], measure, label) for label, measure in measures]
        image = plot_categories(lines, out_dir / "sweep_accuracy.png", title=f"Final accuracy vs {params[0]}",
                                xlabel=params[0], ylabel=FINAL_LABEL)
        return [Image(image, f"final accuracy vs {params[0]} ({mean_note(jobs)}); bars: a lone job's 95% Wilson "
                             "interval, or min..max over the jobs sharing the value (seeds)")]
    if len(params) == 2:
        grids = [(f"{label} final accuracy", *js.param_grid(jobs, params[0], params[1], measure))
                 for label, measure in measures]
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


def _curves(runs: Sequence[tuple[str, rs.RunData]], path: Path, title: str, reward: bool = True,
            best: str | None = None) -> Path | None:
    """The runs' accuracy (`series.accuracy_panels`), training reward and mean length overlaid; None: nothing yet."""
    accuracy = rs.accuracy_panels([(label, run.validation) for label, run in runs])
    series = {key: [s for label, run in runs if (s := rs.step_series(run.steps, key, label)) is not None]
              for key in ("reward", "completions/mean_length")}
    if not any(lines for _, lines in accuracy) and not series["completions/mean_length"] and not (
            reward and series["reward"]):
        return None
    return plot_sweep_curves(accuracy, series["completions/mean_length"], path, title=title,
                             reward=series["reward"] if reward else (), best=best)


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
    counts = Counter(job.status for job in jobs)
    seed = next((p for p in params if p in SEED_KEYS), None)
    summary = (f"**jobs** {len(jobs)} ({', '.join(f'{n} {status}' for status, n in sorted(counts.items()))})"
               f" · **swept** {', '.join(code(p) for p in params) or 'nothing'}"
               + (f" · **averaged over** {code(seed)}" if seed else ""))
    direction = js.sweep_direction(sweep_dir)
    best = js.best_job(jobs, direction)
    labels = [job_label(job.overrides, params, job.name) + (f" ({BEST})" if job is best else "") for job in jobs]
    curves = _curves(list(zip(labels, (rs.load_run(job.path) for job in jobs), strict=True)),
                     out_dir / "sweep_curves.png", "The sweep's jobs compared",
                     best=labels[jobs.index(best)] if best is not None else None)
    best_line = f"; thicker: the best job, {job_label(best.overrides, params, best.name)}" if best else ""
    blocks = [Text(summary), Text(best_words(best, params, direction)), *skipped,
              Heading("Final accuracy against the swept parameters"),
              *_sweep_accuracy(jobs, [p for p in params if p not in SEED_KEYS], out_dir, best),
              *seed_blocks(jobs, params, seed),
              Heading("The jobs compared: accuracy after each stage, training reward and response length"),
              Image(curves, f"one colour per job: {CURVES_NOTE}; then training reward and mean length per "
                            f"step{best_line}") if curves else
              Text("no job has validated a stage or logged a step yet: curves skipped", True),
              Heading("Every job"), _jobs_table(jobs, params, best=best),
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
    cells: dict[str, dict[str, list[float]]] = {}  # stage -> level -> each job's accuracy (its last row)
    for job in jobs:
        grid = rs.stage_grid(rs.load_run(job.path).validation, "accuracy")
        for level in grid.levels:
            for stage, value in zip(grid.stages, grid.values[level], strict=True):
                if value is not None:
                    cells.setdefault(stage, {}).setdefault(level, []).append(value)
    levels = sorted({level for found in cells.values() for level in found}, key=level_order)
    return Table(["after stage", *levels], [[stage, *(spread_text(found[level]) if level in found else "-"
                                                      for level in levels)] for stage, found in cells.items()])


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


# --- runs named together ------------------------------------------------------------------------------------------


def run_labels(run_dirs: Sequence[Path]) -> list[str]:
    """A short, unique label per run: its folder name, with its parent's where names clash or it is a job number.

    >>> run_labels([Path("a/ladder"), Path("b/mixed"), Path("c/mixed"), Path("multirun/2026-12-01_10-00-00/0")])
    ['ladder', 'b/mixed', 'c/mixed', '2026-12-01_10-00-00/0']
    """
    names = [d.name for d in run_dirs]
    return [f"{d.parent.name}/{d.name}" if names.count(d.name) > 1 or d.name.isdigit() else d.name for d in run_dirs]


def flatten(config, prefix: str = "") -> dict[str, str]:
    """A nested config as {"group.key": value as text}.

    >>> flatten({"grpo": {"beta": 0.0, "lr": 1e-6}, "seed": 1})
    {'grpo.beta': '0.0', 'grpo.lr': '1e-06', 'seed': '1'}
    """
    if not isinstance(config, dict):
        return {prefix.rstrip("."): str(config)}
    return {k: v for key, value in config.items() for k, v in flatten(value, f"{prefix}{key}.").items()}


def differences(configs: Sequence[dict]) -> list[tuple[str, list[str]]]:
    """(key, each run's value) for every setting that differs between the runs ("-": not set).

    >>> differences([{"reference": "previous_stage", "seed": 1}, {"reference": "base", "seed": 1}])
    [('reference', ['previous_stage', 'base'])]
    """
    flat = [flatten(c) for c in configs]
    keys = dict.fromkeys(k for f in flat for k in f if not k.startswith(NOT_SETTINGS))
    return [(k, [f.get(k, "-") for f in flat]) for k in keys if len({f.get(k) for f in flat}) > 1]


def _rate(row: dict | None) -> tuple[float | None, int | None]:
    return (None, None) if row is None else (rs.as_number(row.get("accuracy")), trials(row, "accuracy"))


def _final_table(labels: list[str], runs: list[rs.RunData]) -> tuple[Table, list]:
    """Run rows x subset columns of final accuracy, each run after the first marked against the first; the lines."""
    finals = [rs.rows_at(run.validation, max((int(r["stage"]) for r in run.validation
                                               if isinstance(r.get("stage"), int)), default=None)) for run in runs]
    levels = sorted({level for final in finals for level in final}, key=level_order)
    firsts = [None] + [finals[0]] * (len(finals) - 1)  # each run after the first against the first
    rows = [[label, *(rb.marked(*_rate(final.get(level)), _rate(first.get(level) if first else None))
                      for level in levels)] for label, final, first in zip(labels, finals, firsts, strict=True)]
    lines = []
    for level in levels:
        rates = [_rate(final.get(level)) for final in finals]
        values = [value for value, _ in rates]
        lines.append(rs.Series(level, labels, values, *rs.intervals(values, [n for _, n in rates])))
    return Table(["run", *levels], rows), lines


def _runs_table(labels: list[str], run_dirs: Sequence[Path], runs: list[rs.RunData]) -> Table:
    rows = []
    for label, path, run in zip(labels, run_dirs, runs, strict=True):
        stages = stage_records(run.manifest)
        adaptive = any(isinstance(s.end, dict) and s.end.get("reason") != "budget" for s in stages)
        rows.append([label, str(path), fmt(run.manifest.get("curriculum")), fmt(run.manifest.get("status")),
                     f"{sum(s.done for s in stages)}/{len(stages)}", fmt(run.manifest.get("reference")),
                     "yes" if adaptive else "no"])
    return Table(["run", "folder", "curriculum", "status", "stages done", "reference", "ended early"], rows)


def _stage_rows(label: str, run: rs.RunData) -> list[list[str]]:
    """One row per stage: its kind and level, steps of its budget, why it ended, and its KL reference."""
    base = run.manifest.get("base_model")
    rows = []
    for stage in stage_records(run.manifest):
        end = end_cells(stage) or ["-"] * 4
        reference = stage.reference
        refreshed = ("none (beta 0)" if reference is None else "base model" if reference == base
                     else "previous stage" if reference == stage.policy_init else str(reference))
        rows.append([label, fmt(stage.name), fmt(stage.kind), fmt(stage.level_label), fmt(stage.status),
                     f"{fmt(stage.steps_done)}/{fmt(stage.steps_budget)}", end[0], end[2], refreshed,
                     fmt(stage.wall_seconds, 1)])
    return rows


def _per_stage_table(labels: list[str], runs: list[rs.RunData]) -> Table:
    """Every run's stage rows x subset columns, one after the other, changes marked within each run."""
    grids = [rs.stage_grid(run.validation, "accuracy", rs.planned_stages(run.manifest)) for run in runs]
    levels = sorted({level for grid in grids for level in grid.levels}, key=level_order)
    rows = []
    for label, grid in zip(labels, grids, strict=True):
        columns = {level: rb.rate_cells(grid, level) if level in grid.values else ["-"] * len(grid.stages)
                   for level in levels}
        rows += [[label, stage, *(columns[level][i] for level in levels)] for i, stage in enumerate(grid.stages)]
    return Table(["run", "after stage", *levels], rows)


def compare_report(run_dirs: Sequence[Path], out_dir: Path) -> tuple[str, list]:
    """The title and blocks of runs side by side; draws its PNGs into `out_dir`."""
    runs = [rs.load_run(d) for d in run_dirs]
    labels = run_labels(run_dirs)
    blocks: list = [Heading("The runs"), _runs_table(labels, run_dirs, runs)]
    blocks += [Text(f"{code(label)}: {note}", True) for label, run in zip(labels, runs, strict=True)
               for note in run.notes]
    diffs = differences([run.config for run in runs])
    blocks += [Heading("What differs between their configs")]
    if diffs:
        blocks.append(Table(["setting", *labels], [[key, *values] for key, values in diffs[:MAX_DIFFERENCES]]))
        if len(diffs) > MAX_DIFFERENCES:
            blocks.append(Text(f"{len(diffs) - MAX_DIFFERENCES} more differing settings not shown", True))
    else:
        blocks.append(Text("their config.yaml files agree on every setting (or are missing)", True))
    table, lines = _final_table(labels, runs)
    blocks += [Heading("Final accuracy per subset (after each run's last validated stage)"), table,
               Text(f"{rb.UP} / {rb.DOWN}: above / below the first run ({code(labels[0])}) beyond chance "
                    "(Newcombe's 95% interval for the difference excludes 0); unmarked: within noise.")]
    if lines:
        image = plot_categories(lines, out_dir / "compare_final.png", title="Final accuracy vs run", xlabel="run",
                                ylabel=FINAL_LABEL, connect=False)
        blocks.append(Image(image, "final accuracy per subset, each run with its 95% Wilson interval"))
    curves = _curves(list(zip(labels, runs, strict=True)), out_dir / "compare_curves.png", "The runs compared",
                     reward=False)
    blocks += [Heading("Accuracy after each stage and response length"),
               Image(curves, f"one colour per run: {CURVES_NOTE}; and training mean length per step") if curves else
               Text("no run has validated a stage or logged a step yet: curves skipped", True),
               Heading("Accuracy per stage"), _per_stage_table(labels, runs), Text(rb.change_note(runs[0].task_report)),
               Heading("How each stage ended"),
               Table(["run", "stage", "kind", "level", "status", "steps", "ended by", "held-out accuracy",
                      "KL reference", "wall s"],
                     [row for label, run in zip(labels, runs, strict=True) for row in _stage_rows(label, run)])]
    return f"Comparison: {' vs '.join(labels)}", blocks
