"""`python -m eval.report [DIR] [--outputs ROOT]`: plots, report.md and a self-contained report.html.

DIR is a run directory or a Hydra multirun (sweep) directory; without it, the most recently
modified of ROOT/runs/* and ROOT/multirun/* (ROOT defaults to the config's `paths.output_dir`, where
`python -m train` writes). Everything goes to
`DIR/report/`. A report is a list of blocks (heading, text, table, image) rendered as
Markdown that points at the PNGs; report.html is that Markdown rendered by markdown-it-py with the
PNGs embedded, so the two never disagree.
Data that is missing (a run in progress, a failed sweep job, a key not logged) becomes a note.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from rich.console import Console
from rich.markup import escape

from conf import CONF_DIR
from core.rundir import RUN_JSON, Status, read_mapping, stage_records
from eval import report_adaptive as ra
from eval import report_series as rs
from eval.report_blocks import Heading, Image, Table, Text, fmt, to_html, to_markdown
from eval.report_plots import (
    Panel,
    plot_stage_grid,
    plot_step_panels,
    plot_sweep_curves,
    plot_sweep_heatmaps,
    plot_sweep_lines,
)

REPORT_DIR = "report"
# (metrics.jsonl key, panel title, y label, why it may be absent) of the collapse watch
# A share is drawn on a fixed 0..1 axis.
COLLAPSE_KEYS = (
    ("entropy", "policy entropy: a fast fall is collapse", "nats / token", "not logged by this TRL version"),
    ("completions/clipped_ratio", "truncated: hit max_completion_length", "share", "not logged"),
    ("frac_reward_zero_std", "zero-variance groups: no advantage, no signal", "share", "not logged"),
    ("completions/distinct_share", "distinct completions per group: near-identical rollouts", "share",
     "logged by runs since the collapse guard"),
    ("kl", "KL to the reference", "KL", "logged only when grpo.beta > 0"),
)


# --- a run ----------------------------------------------------------------------------------------


def _stage_table(manifest: dict, steps: list[dict]) -> Table:
    """One row per planned stage; a running stage's steps are counted from metrics.jsonl, since
    run.json records `steps_done` only when a stage ends."""
    logged: dict = {}
    for row in steps:
        stage_step = int(rs.as_number(row.get("stage_step")) or 0)
        logged[row.get("stage")] = max(logged.get(row.get("stage"), 0), stage_step)
    rows = []
    for s in stage_records(manifest):
        done = logged.get(s.index) if s.status == Status.RUNNING else s.steps_done
        rows.append([fmt(s.index), fmt(s.name), fmt(s.kind), fmt(s.ppl_label), fmt(s.status),
                     f"{fmt(done)}/{fmt(s.steps_budget)}", f"{fmt(s.global_step_start)}..{fmt(s.global_step_end)}",
                     fmt(s.wall_seconds, 1)])
    return Table(["#", "stage", "kind", "ppl", "status", "steps", "global steps", "wall s"], rows)


def _config_facts(config: dict) -> str:
    """The settings a reader compares runs by, from config.yaml: model, reward weights, GRPO's key knobs."""
    def section(name: str) -> dict:
        return config.get(name) if isinstance(config.get(name), dict) else {}

    weights = section("reward").get("weights") or {}
    grpo = section("grpo")
    nonzero = ", ".join(f"{k} {v}" for k, v in weights.items() if v) or "-"
    knobs = ", ".join(f"{k} {grpo[k]}" for k in ("learning_rate", "beta", "num_generations",
                                                  "max_completion_length", "loss_type") if k in grpo)
    return (f"**model** {fmt(section('model').get('name'))} · **reward weights** {nonzero} · "
            f"**grpo** {knobs or '-'} · **eval subsets** {fmt(section('eval').get('subsets'))}")


def _summary(run: rs.RunData) -> list:
    m = run.manifest
    stages = stage_records(m)
    done = sum(s.done for s in stages)
    facts = [f"**status** {fmt(m.get('status'))}", f"**curriculum** {fmt(m.get('curriculum'))}",
             f"**stages done** {done}/{len(stages)}", f"**base model** `{fmt(m.get('base_model'))}`",
             f"**created** {fmt(m.get('created'))}", f"**training steps logged** {len(run.steps)}"]
    blocks = [Text(" · ".join(facts))]
    if run.config:
        blocks.append(Text(_config_facts(run.config)))
    blocks += [Text(note, note=True) for note in run.notes]
    blocks += [Text(f"stage {s.name} failed: {s.error}", True) for s in stages if s.error]
    if stages:
        blocks += [Heading("Stages"), _stage_table(m, run.steps)]
    return blocks


def _grid_table(grid: rs.StageGrid, digits: int) -> Table:
    """Stage rows x subset columns (the transpose of the plot: one row per stage reads better)."""
    rows = [[stage, *(fmt(grid.values[ppl][i], digits) for ppl in grid.ppls)]
            for i, stage in enumerate(grid.stages)]
    return Table(["after stage", *(f"{ppl}ppl" for ppl in grid.ppls)], rows)


# Beside accuracy and length: does the reasoning support the answer (eval/reasoning.py)?
REASONING_GRIDS = (
    ("reasoning_agrees_rate", "Reasoning that agrees with the answer (share of completions with reasoning)"),
    ("correct_but_disagrees", "Right answers whose reasoning says otherwise (share of all completions)"),
    ("invented_name_rate", "Completions naming a person not in the puzzle (share of all completions)"),
)


def _validation(run: rs.RunData, out_dir: Path) -> list:
    blocks: list = [Heading("Validation accuracy per subset")]
    if not run.validation:
        return [*blocks, Text("no rows in validation.jsonl yet (baseline validation not finished)", True)]
    planned = rs.planned_stages(run.manifest)
    plotted = rs.stage_grid(run.validation, "accuracy")
    image = plot_stage_grid(plotted, "accuracy (exact: every person right)",
                            "Accuracy per subset across stages", out_dir / "accuracy.png", unit_range=True)
    blocks += [Image(image, "accuracy per subset after each stage"),
               _grid_table(rs.stage_grid(run.validation, "accuracy", planned), 3),
               Heading("Validation format rate (answers in the required tags)"),
               _grid_table(rs.stage_grid(run.validation, "format_rate", planned), 3),
               Heading("Validation mean response length (tokens)"),
               _grid_table(rs.stage_grid(run.validation, "mean_tokens", planned), 1)]
    for key, title in REASONING_GRIDS:
        blocks += [Heading(title), _grid_table(rs.stage_grid(run.validation, key, planned), 3)]
    return blocks


def _stage_ends(run: rs.RunData) -> list:
    """Why each stage ended (promotion by skill, the collapse guard, or its step budget) and the guard's events."""
    ends, events = ra.stage_end_rows(run.manifest), ra.guard_rows(run.manifest)
    blocks: list = []
    if ends:
        headers = ["stage", "ended by", "step/budget", "held-out accuracy", "threshold", "weights kept from step"]
        blocks += [Heading("How each stage ended"), Table(headers, ends)]
    if events:
        blocks += [Heading("Collapse guard events"),
                   Table(["stage", "stage step", "global step", "signal", "value", "threshold", "window", "action"],
                         events)]
    return blocks


def _length(run: rs.RunData, boundaries, out_dir: Path, events=()) -> list:
    mean = rs.step_series(run.steps, "completions/mean_length", "mean length")
    markers = rs.validation_points(run.validation, "mean_tokens")
    if mean is None and not markers:
        return [Text("no completion lengths in metrics.jsonl, no validation yet: length plot skipped", True)]
    panel = Panel("training mean length per step (band: min..max), validation mean after each stage",
                  "tokens", [mean] if mean else [], markers,
                  rs.step_band(run.steps, "completions/min_length", "completions/max_length"), events=events)
    image = plot_step_panels([panel], boundaries, "Response length", out_dir / "length.png")
    return [Image(image, "response length over training; dashed lines: stage starts; "
                         "triangles: promoted on skill; crosses: collapse guard events")]


def _rewards(run: rs.RunData, boundaries, out_dir: Path) -> list:
    series = rs.reward_series(run.steps)
    if not series:
        return [Text("no reward columns in metrics.jsonl yet: reward plot skipped", True)]
    total = [s for s in series if s.label == "total"]
    panels = [Panel("total reward (weighted sum)", "reward", total)] if total else []
    components = [s for s in series if s.label != "total"]
    if components:
        panels.append(Panel("each component's mean (unweighted)", "reward", components))
    image = plot_step_panels(panels, boundaries, "Reward per step", out_dir / "reward.png")
    return [Image(image, "reward total and components per step")]


def _format(run: rs.RunData, boundaries, out_dir: Path) -> list:
    train = rs.step_series(run.steps, "rewards/format_reward/mean", "format_reward (training)")
    markers = rs.validation_points(run.validation, "format_rate")
    blocks = [] if train else [Text("no rewards/format_reward/mean in metrics.jsonl (format weight 0?): "
                                    "only the validation format rate is drawn", True)]
    if not train and not markers:
        return [Text("no format reward and no validation format rate yet: format plot skipped", True)]
    panel = Panel("format reward per step, validation format rate after each stage (markers)", "rate",
                  [train] if train else [], markers, unit_range=True)
    image = plot_step_panels([panel], boundaries, "Format", out_dir / "format.png")
    return [*blocks, Image(image, "share of completions in the required format")]


def _collapse(run: rs.RunData, boundaries, out_dir: Path, events=()) -> list:
    panels, notes = [], []
    for key, title, ylabel, why in COLLAPSE_KEYS:
        series = rs.step_series(run.steps, key)
        if series is None:
            notes.append(Text(f"no numeric `{key}` in metrics.jsonl ({why}): panel '{title}' skipped", True))
        else:
            panels.append(Panel(f"{title}  ({key})", ylabel, [series], unit_range=ylabel == "share", events=events))
    notes += _ratio_clipping_note(run.steps)
    if not panels:
        return notes
    image = plot_step_panels(panels, boundaries, "Collapse watch", out_dir / "collapse.png")
    return [Image(image, "entropy, truncation, zero-variance groups and KL per step"), *notes]


def _ratio_clipping_note(steps: list[dict]) -> list:
    """Say when PPO-style ratio clipping (epsilon, clip-higher's epsilon_high) never acted, and why."""
    clipped = [r["clip_ratio/region_mean"] for r in steps if isinstance(r.get("clip_ratio/region_mean"), int | float)]
    if not clipped or any(clipped):
        return []
    return [Text("`clip_ratio/region_mean` is 0 at every step: with one optimizer step per generation batch and "
                 "num_iterations 1 the importance ratio is exactly 1, so epsilon / epsilon_high (clip-higher) never "
                 "acted. They act only when num_iterations > 1 or steps_per_generation > "
                 "gradient_accumulation_steps. (The truncation panel's `completions/clipped_ratio` is another "
                 "thing: completions cut at max_completion_length.)", True)]


def run_report(run_dir: Path, out_dir: Path) -> tuple[str, list]:
    """The title and blocks of one run's report; draws its PNGs into `out_dir`."""
    run = rs.load_run(run_dir)
    boundaries = rs.stage_boundaries(run.manifest, run.steps)
    events = [*ra.promotion_points(run.manifest), *ra.guard_events(run.manifest)]
    blocks = [*_summary(run), *_stage_ends(run), *_validation(run, out_dir),
              Heading("Response length"), *_length(run, boundaries, out_dir, events),
              Heading("Reward"), *_rewards(run, boundaries, out_dir),
              Heading("Format"), *_format(run, boundaries, out_dir),
              Heading("Collapse watch"), *_collapse(run, boundaries, out_dir, events)]
    return f"Run report: {run_dir.name}", blocks


# --- a sweep --------------------------------------------------------------------------------------


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


# --- entry points ---------------------------------------------------------------------------------


def is_sweep(path: Path) -> bool:
    """A multirun directory: Hydra's multirun.yaml, or numbered job folders and no run.json of its own."""
    if (path / "multirun.yaml").exists():
        return True
    return not (path / RUN_JSON).exists() and any(p.is_dir() and p.name.isdigit() for p in path.iterdir())


def _last_modified(path: Path) -> float:
    """Newest mtime of what a run or sweep holds, two levels deep (a directory's own mtime misses files
    rewritten in place). The report folder is left out, and so is the directory's own mtime, which
    creating that folder bumps: reporting on an old run must not make it the latest."""
    times = []
    for child in path.iterdir():
        if child.name != REPORT_DIR:
            times.append(child.stat().st_mtime)
            if child.is_dir():
                times += [grand.stat().st_mtime for grand in child.iterdir() if grand.name != REPORT_DIR]
    return max(times, default=path.stat().st_mtime)


def latest_output(outputs: Path) -> Path | None:
    """The most recently modified of `outputs`/runs/* and `outputs`/multirun/*, or None.

    A run counts once it has a run.json: a directory left by a config error (Hydra's files and
    error.txt only) has nothing to report.
    """
    candidates = [p for sub in ("runs", "multirun") if (outputs / sub).is_dir()
                  for p in (outputs / sub).iterdir() if p.is_dir() and (sub == "multirun" or (p / RUN_JSON).exists())]
    return max(candidates, key=_last_modified, default=None)


def write_report(target: Path) -> Path:
    """Write `target`/report/ (report.md, report.html, PNGs) for a run or a sweep; returns that folder."""
    out_dir = target / REPORT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.png"):  # a figure skipped this time must not linger from an earlier report
        stale.unlink()
    title, blocks = (sweep_report if is_sweep(target) else run_report)(target, out_dir)
    markdown = to_markdown(title, blocks)
    (out_dir / "report.md").write_text(markdown)
    (out_dir / "report.html").write_text(to_html(title, markdown, out_dir))
    return out_dir


def configured_output_dir() -> Path:
    """`paths.output_dir` of the composed config: where `python -m train` puts runs and sweeps."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return Path(compose("config").paths.output_dir)


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m eval.report", description=__doc__.split("\n")[0])
    parser.add_argument("dir", nargs="?", type=Path, help="a run or sweep directory (default: the latest)")
    parser.add_argument("--outputs", type=Path, default=None,
                        help="output root searched for the latest run or sweep (default: paths.output_dir)")
    args = parser.parse_args(argv)
    outputs = args.outputs or configured_output_dir()
    target = args.dir or latest_output(outputs)
    if target is None:
        raise SystemExit(f"no run or sweep under {outputs}/runs or {outputs}/multirun; pass a directory")
    if not target.is_dir():
        raise SystemExit(f"{target}: not a directory")
    out_dir = write_report(target)
    images = sorted(p.name for p in out_dir.glob("*.png"))
    console = Console()
    # soft_wrap: a path must stay on one line to be copied; escape: a path may hold "[...]" (rich markup)
    console.print(f"[bold green]report[/] for {escape(str(target))} written to:", soft_wrap=True)
    for name in ("report.md", "report.html"):
        console.print(f"  {escape(str(out_dir / name))}", soft_wrap=True)
    console.print(f"  {len(images)} image(s): {', '.join(images) or 'none'}", soft_wrap=True)
    return out_dir


if __name__ == "__main__":
    main()
