"""Completion lengths as a distribution per stage: training (each step's mean, from metrics.jsonl) and validation
(every graded completion's tokens, from `samples/<k>-<name>/<level>.jsonl`).

TRL logs a step's mean, shortest and longest completion, not each completion's length, so the training panel is
the spread of the stage's step means with its shortest and longest single completion beside it; the samples files
hold each validation completion's `tokens`, so the validation panel is the distribution itself, per subset.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.rundir.files import BASELINE
from core.rundir.records import stage_records
from eval.report.blocks import Image, Text
from eval.report.plot_stages import StageBoxes, plot_stage_boxes
from eval.report.samples import read_subset, stage_folders, subset_files
from eval.report.series import as_number

MEAN, SHORTEST, LONGEST = "completions/mean_length", "completions/min_length", "completions/max_length"


def training_boxes(manifest: dict, steps: Sequence[dict]) -> StageBoxes | None:
    """Each stage's per-step mean lengths, with its shortest and longest completion; None without any.

    >>> manifest = {"stages": [{"index": 1, "name": "2ppl"}, {"index": 2, "name": "3ppl"}]}
    >>> rows = [{"stage": 1, MEAN: 30.0, SHORTEST: 5, LONGEST: 60}, {"stage": 1, MEAN: 20.0, SHORTEST: 8, LONGEST: 40}]
    >>> boxes = training_boxes(manifest, rows)
    >>> boxes.stages, boxes.groups, boxes.extremes
    (['2ppl', '3ppl'], {'': [[30.0, 20.0], []]}, [(5.0, 60.0), (None, None)])
    """
    stages = [(s.index, str(s.name)) for s in stage_records(manifest) if s.index is not None]
    known = {index for index, _ in stages}
    stages += [(index, f"stage {index}") for index in sorted({r.get("stage") for r in steps} - known, key=str)
               if isinstance(index, int)]
    values, extremes = [], []
    for index, _ in stages:
        rows = [r for r in steps if r.get("stage") == index]
        values.append([v for r in rows if (v := as_number(r.get(MEAN))) is not None])
        lows = [v for r in rows if (v := as_number(r.get(SHORTEST))) is not None]
        highs = [v for r in rows if (v := as_number(r.get(LONGEST))) is not None]
        extremes.append((min(lows, default=None), max(highs, default=None)))
    if not any(values):
        return None
    return StageBoxes("training: each step's mean completion length (box: the steps' spread)", "tokens",
                      [name for _, name in stages], {"": values}, extremes)


def validation_boxes(run_dir: Path, stage_names: dict[int, str]) -> tuple[StageBoxes | None, list]:
    """Every validation completion's tokens per stage (baseline first) and subset, from the samples files, with
    notes on files that could not be read; None without any."""
    folders = stage_folders(run_dir)
    names = [stage_names.get(index) or (BASELINE if index == 0 else folder.name.partition("-")[2])
             for index, folder in folders]
    groups: dict[str, list[list[float]]] = {}
    notes: list = []
    for k, (_, folder) in enumerate(folders):
        for level, path in subset_files(folder):
            rows, unread = read_subset(path)
            notes += unread
            tokens = [v for r in rows if (v := as_number(r.get("tokens"))) is not None]
            groups.setdefault(level, [[] for _ in folders])[k] = tokens
    if not any(any(per_stage) for per_stage in groups.values()):
        return None, notes
    title = "validation: every completion's length, after each stage, by subset (samples files)"
    return StageBoxes(title, "tokens", names, groups), notes


def length_distribution_blocks(run_dir: Path, manifest: dict, steps: Sequence[dict], stage_names: dict[int, str],
                               out_dir: Path) -> list:
    """The figure of completion lengths per stage, or a note for each half that has nothing to draw."""
    training = training_boxes(manifest, steps)
    validation, notes = validation_boxes(run_dir, stage_names)
    if training is None:
        notes.append(Text(f"no numeric `{MEAN}` in metrics.jsonl: the training length distribution is skipped", True))
    if validation is None:
        notes.append(Text("no `tokens` in samples/<k>-<name>/<level>.jsonl: the validation length distribution is "
                          "skipped", True))
    panels = [p for p in (training, validation) if p is not None]
    if not panels:
        return notes
    image = plot_stage_boxes(panels, "Completion length per stage", out_dir / "length_per_stage.png")
    caption = ("completion length per stage: box from the first to the third quartile, line at the median, whiskers "
               "to 1.5 times that range, circles beyond; n under each stage: steps (training), completions "
               "(validation)")
    return [Image(image, caption), *notes]
