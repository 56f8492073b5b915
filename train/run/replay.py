"""A resumed run's offline wandb run made whole: offline, wandb gives each attempt its own folder and `wandb sync`
does not reliably join them, so before a resumed attempt logs anything it is sent, at their original steps, what
the run's files record up to where each stage starts now; the newest folder, synced, is then the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from itertools import groupby
from pathlib import Path

from core.rundir.files import (
    METRICS,
    ROLLOUTS,
    VALIDATION,
    VALIDATION_STEPS,
    read_jsonl,
    samples_dir,
    samples_file,
    stage_dirname,
)
from curriculum.tasks.base import Task
from eval.validation import sample_cells, tracked_validation
from train.run.resume import StageAction, StageStart
from train.run.stage_end import tracked_guard
from train.stages.training import checkpoint_step
from train.tracking import send_trainer_line, table_row

# The step a row of `kind` is sent at, and the order a step's rows are sent in: training, then validation.
ORDER = {"metrics": 0, "val_step": 1, "rollouts": 2, "validation": 3}


def replay_history(tracker, run_dir: Path, starts: Mapping[int, StageStart], task: Task) -> int:
    """Send an offline `tracker` what earlier attempts logged before where each stage starts now; the rows sent."""
    if tracker.offline_folder is None:
        return 0
    rows = sorted(_recorded(run_dir, starts), key=lambda item: (item[1]["global_step"], ORDER[item[0]]))
    sent = 0
    for (source, step), group in groupby(rows, key=lambda item: (item[0], item[1]["global_step"])):
        sent += _send(tracker, run_dir, source, step, [row for _, row in group], starts, task)
    return sent


def replayed_through(start: StageStart) -> float:
    """The last step of `start`'s stage already trained (all of one this attempt does not train)."""
    if start.action in (StageAction.SKIP, StageAction.ADOPT):
        return math.inf
    return checkpoint_step(start.checkpoint) if start.checkpoint is not None else 0


def _recorded(run_dir: Path, starts: Mapping[int, StageStart]) -> Iterator[tuple[str, dict]]:
    """(source, row) for each row recorded before where its stage starts now."""
    through = {index: replayed_through(start) for index, start in starts.items()}
    for source, name in (("metrics", METRICS), ("val_step", VALIDATION_STEPS), ("rollouts", ROLLOUTS)):
        for row in read_jsonl(run_dir / name):
            if row.get("stage") in through and row["stage_step"] <= through[row["stage"]]:
                yield source, row
    skipped = {0} | {index for index, start in starts.items() if start.action is StageAction.SKIP}
    for row in read_jsonl(run_dir / VALIDATION):
        if row.get("stage") in skipped:  # a stage validated again now logs its validation then
            yield "validation", row


def _send(tracker, run_dir: Path, source: str, step: int, rows: list[dict], starts: Mapping[int, StageStart],
          task: Task) -> int:
    """One source's rows at one global step to the tracker, as they were logged live."""
    if source == "rollouts":  # one table a step, as train/tracking.py `RolloutSampler` logs it
        tracker.table("rollouts/samples", [table_row(row) for row in rows], step=step)
        return len(rows)
    for row in rows:
        if source == "metrics" and str(row.get("kind", "")).startswith("guard:"):
            tracker.log(tracked_guard(row), step=step)
        elif source == "metrics":
            send_trainer_line(tracker, row, starts[row["stage"]].stage.kind_facts)
        elif source == "val_step":
            tracker.log(tracked_validation(row, task, "val_step"), step=step)
        else:
            _send_validation(tracker, run_dir, row, task)
    return len(rows)


def _send_validation(tracker, run_dir: Path, row: dict, task: Task) -> None:
    """A validation after a stage: its samples' table, then its metrics, as `validate` logs them."""
    level, step = row["level"], row["global_step"]
    samples = samples_file(samples_dir(run_dir, stage_dirname(row["stage"], row["stage_name"])), level)
    if samples.exists():
        cells = [sample_cells(row, level, sample, task.report.sample_columns) for sample in read_jsonl(samples)]
        tracker.table(f"val/{level}/samples", cells, step)
    tracker.log({"stage": row["stage"], **tracked_validation(row, task)}, step=step)
