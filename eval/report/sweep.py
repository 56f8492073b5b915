"""A Hydra multirun's report: final accuracy against the swept parameters, the jobs' curves, every job."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from core.rundir import RUN_JSON, read_mapping
from eval.report import adaptive as ra
from eval.report import series as rs
from eval.report.blocks import Heading, Image, Table, Text, fmt
from eval.report.plots import plot_sweep_curves, plot_sweep_heatmaps, plot_sweep_lines


def _accuracy_measures(jobs: Sequence[rs.Job]) -> list[tuple[str, object]]:
    """(label, job -> value): the mean final accuracy, then each subset's."""
    ppls = sorted({ppl for job in jobs for ppl in job.final_accuracy})
    return [("mean", rs.mean_accuracy),
            *((f"{ppl}ppl", lambda job, ppl=ppl: job.final_accuracy.get(ppl)) for ppl in ppls)]


def _jobs_table(jobs: Sequence[rs.Job], params: list[str], ranked: bool = False) -> Table:
    ppls = sorted({ppl for job in jobs for ppl in job.final_accuracy})
    if ranked:  # best first; unfinished jobs last
        jobs = sorted(jobs, key=lambda j: (rs.mean_accuracy(j) is None, -(rs.mean_accuracy(j) or 0.0)))
    rows = [[job.name, *(fmt(job.overrides.get(p)) for p in params), job.status,
             f"{job.stages_done}/{job.stages_total}", fmt(job.objective), fmt(rs.mean_accuracy(job)),
             *(fmt(job.final_accuracy.get(ppl)) for ppl in ppls), fmt(job.error)] for job in jobs]
    return Table(["job", *params, "status", "stages", "objective", "mean acc", *(f"{p}ppl" for p in ppls),
                  "error"], rows)


def _sweep_accuracy(jobs: Sequence[rs.Job], params: list[str], out_dir: Path) -> list:
    measures = _accuracy_measures(jobs)
    if not any(rs.mean_accuracy(job) is not None for job in jobs):
        return [Text("no job has finished its last stage: nothing to plot yet", True)]
    if len(params) == 1:
        lines = [rs.param_line(jobs, params[0], measure, label) for label, measure in measures]
        return [Image(plot_sweep_lines(lines, params[0], out_dir / "sweep_accuracy.png"),
                      f"final accuracy vs {params[0]}")]
    if len(params) == 2:
        grids = [(f"{label} final accuracy", *rs.param_grid(jobs, params[0], params[1], measure))
                 for label, measure in measures]
        image = plot_sweep_heatmaps(grids, params[0], params[1], out_dir / "sweep_accuracy.png")
        return [Image(image, f"final accuracy over {params[0]} x {params[1]}")]
    if not params:
        return [Text("the jobs share every override: no swept parameter to plot against", True)]
    return [Text(f"{len(params)} swept parameters: jobs ranked by mean final accuracy instead of a plot"),
            _jobs_table(jobs, params, ranked=True)]


def _sweep_curves(jobs: Sequence[rs.Job], params: list[str], out_dir: Path) -> list:
    """Every job's accuracy-after-each-stage and length curves overlaid on the global-step axis."""
    accuracy, length = [], []
    for job in jobs:
        label = ra.job_label(job.overrides, params, job.name)
        accuracy.append(ra.accuracy_curve(read_mapping(job.path / RUN_JSON), label))
        length.append(ra.length_curve(rs.load_run(job.path).steps, label))
    accuracy, length = [s for s in accuracy if s is not None], [s for s in length if s is not None]
    if not accuracy and not length:
        return [Text("no job has validated a stage or logged a step yet: curves skipped", True)]
    image = plot_sweep_curves(accuracy, length, out_dir / "sweep_curves.png")
    return [Image(image, "one colour per job: mean accuracy after each stage, and mean length per step")]


def sweep_report(sweep_dir: Path, out_dir: Path) -> tuple[str, list]:
    """The title and blocks of a multirun's report; draws its PNG into `out_dir`."""
    jobs = rs.load_sweep(sweep_dir)
    if not jobs:
        return f"Sweep report: {sweep_dir.name}", [Text("no job directories (<sweep>/<n>/) yet", True)]
    params = rs.swept_params(jobs)
    counts = Counter(job.status for job in jobs)
    summary = (f"**jobs** {len(jobs)} ({', '.join(f'{n} {status}' for status, n in sorted(counts.items()))})"
               f" · **swept** {', '.join(f'`{p}`' for p in params) or 'nothing'}")
    blocks = [Text(summary), Heading("Final accuracy against the swept parameters"),
              *_sweep_accuracy(jobs, params, out_dir),
              Heading("The jobs compared: accuracy after each stage and response length"),
              *_sweep_curves(jobs, params, out_dir), Heading("Every job"), _jobs_table(jobs, params),
              Text(f"one job's curves: `python -m eval.report {sweep_dir}/<job>`")]
    return f"Sweep report: {sweep_dir.name}", blocks
