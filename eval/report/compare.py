"""Runs side by side (`python -m eval.report RUN_A RUN_B ...`): what differs between their configs, final accuracy
per subset (each against the first run, marked where the intervals allow), accuracy and response length overlaid,
every run's accuracy per stage, and how each stage ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.rundir.records import level_order, row_level, stage_records
from core.stats import change, rate_text
from eval.metrics import trials
from eval.report import series as rs
from eval.report.blocks import DOWN, UP, Heading, Image, Table, Text, change_note, code, fmt, rate_cells
from eval.report.plots import CURVES_NOTE, plot_sweep_curves, plot_sweep_lines
from eval.report.story import stage_end_rows

# Config keys that differ between any two runs on the same machine and say nothing about the method.
NOT_SETTINGS = ("paths.", "hydra.", "run_name", "wandb_id")
MAX_DIFFERENCES = 40


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
    flat: dict[str, str] = {}
    for key, value in config.items():
        flat.update(flatten(value, f"{prefix}{key}."))
    return flat


def differences(configs: Sequence[dict]) -> list[tuple[str, list[str]]]:
    """(key, each run's value) for every setting that differs between the runs ("-": not set).

    >>> differences([{"reference": "previous_stage", "seed": 1}, {"reference": "base", "seed": 1}])
    [('reference', ['previous_stage', 'base'])]
    """
    flat = [flatten(c) for c in configs]
    keys = dict.fromkeys(k for f in flat for k in f if not k.startswith(NOT_SETTINGS))
    return [(k, [f.get(k, "-") for f in flat]) for k in keys if len({f.get(k) for f in flat}) > 1]


def _final_rows(run: rs.RunData) -> dict[str, dict]:
    """Each subset's validation row (by level) after the run's last validated stage."""
    last = max((int(r["stage"]) for r in run.validation if isinstance(r.get("stage"), int)), default=None)
    return {row_level(r): r for r in run.validation if r.get("stage") == last and row_level(r) is not None}


def _final_cell(row: dict | None, first: dict | None) -> str:
    """A run's final accuracy with its interval and n, marked where it differs from the first run's beyond chance."""
    if row is None:
        return "-"
    mark = {1: UP, -1: DOWN}.get(change(*_rate(first), *_rate(row)) if first is not row else 0, "")
    return f"{rate_text(*_rate(row))} {mark}".rstrip()


def _final_table(labels: list[str], runs: list[rs.RunData]) -> tuple[Table, list]:
    """Run rows x subset columns of final accuracy; each run after the first marked against the first."""
    finals = [_final_rows(run) for run in runs]
    levels = sorted({level for final in finals for level in final}, key=level_order)
    rows = [[label, *(_final_cell(final.get(level), finals[0].get(level)) for level in levels)]
            for label, final in zip(labels, finals, strict=True)]
    lines = []
    for level in levels:
        rates = [_rate(final.get(level)) for final in finals]
        values = [value for value, _ in rates]
        lines.append(rs.Series(level, labels, values, *rs.intervals(values, [n for _, n in rates])))
    return Table(["run", *levels], rows), lines


def _rate(row: dict | None) -> tuple[float | None, int | None]:
    return (None, None) if row is None else (rs.as_number(row.get("accuracy")), trials(row, "accuracy"))


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
    ends = {row[0]: row for row in stage_end_rows(run.manifest)}
    base = run.manifest.get("base_model")
    rows = []
    for stage in stage_records(run.manifest):
        end = ends.get(str(stage.name), [None, "-", None, "-"])
        entry = next((s for s in run.manifest.get("stages") or [] if isinstance(s, dict)
                      and s.get("index") == stage.index), {})
        reference = entry.get("reference")
        refreshed = ("none (beta 0)" if reference is None else "base model" if reference == base
                     else "previous stage" if reference == entry.get("policy_init") else str(reference))
        rows.append([label, fmt(stage.name), fmt(stage.kind), fmt(stage.level_label), fmt(stage.status),
                     f"{fmt(stage.steps_done)}/{fmt(stage.steps_budget)}", end[1], end[3], refreshed,
                     fmt(stage.wall_seconds, 1)])
    return rows


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
        shown = diffs[:MAX_DIFFERENCES]
        blocks.append(Table(["setting", *labels], [[key, *values] for key, values in shown]))
        if len(diffs) > len(shown):
            blocks.append(Text(f"{len(diffs) - len(shown)} more differing settings not shown", True))
    else:
        blocks.append(Text("their config.yaml files agree on every setting (or are missing)", True))
    table, lines = _final_table(labels, runs)
    blocks += [Heading("Final accuracy per subset (after each run's last validated stage)"), table,
               Text(f"{UP} / {DOWN}: above / below the first run ({code(labels[0])}) beyond chance "
                    "(Newcombe's 95% interval for the difference excludes 0); unmarked: within noise.")]
    if lines:
        image = plot_sweep_lines(lines, "run", out_dir / "compare_final.png", connect=False)
        blocks.append(Image(image, "final accuracy per subset, each run with its 95% Wilson interval"))
    curves = rs.accuracy_panels([(label, run.validation) for label, run in zip(labels, runs, strict=True)])
    lengths = [rs.step_series(run.steps, "completions/mean_length", label) for label, run in zip(labels, runs,
                                                                                                 strict=True)]
    lengths = [c for c in lengths if c is not None]
    blocks.append(Heading("Accuracy after each stage and response length"))
    if any(lines for _, lines in curves) or lengths:
        image = plot_sweep_curves(curves, lengths, out_dir / "compare_curves.png", title="The runs compared")
        blocks.append(Image(image, f"one colour per run: {CURVES_NOTE}; and training mean length per step"))
    else:
        blocks.append(Text("no run has validated a stage or logged a step yet: curves skipped", True))
    blocks += [Heading("Accuracy per stage"), _per_stage_table(labels, runs), Text(change_note(runs[0].task_report)),
               Heading("How each stage ended"),
               Table(["run", "stage", "kind", "level", "status", "steps", "ended by", "held-out accuracy",
                      "KL reference", "wall s"],
                     [row for label, run in zip(labels, runs, strict=True) for row in _stage_rows(label, run)])]
    return f"Comparison: {' vs '.join(labels)}", blocks


def _per_stage_table(labels: list[str], runs: list[rs.RunData]) -> Table:
    """Every run's stage rows x subset columns, one after the other, changes marked within each run."""
    grids = [rs.stage_grid(run.validation, "accuracy", rs.planned_stages(run.manifest)) for run in runs]
    levels = sorted({level for grid in grids for level in grid.levels}, key=level_order)
    rows = []
    for label, grid in zip(labels, grids, strict=True):
        columns = {level: rate_cells(grid, level) if level in grid.values else ["-"] * len(grid.stages)
                   for level in levels}
        rows += [[label, stage, *(columns[level][i] for level in levels)] for i, stage in enumerate(grid.stages)]
    return Table(["run", "after stage", *levels], rows)
