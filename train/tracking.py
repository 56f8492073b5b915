"""Where a run's numbers go: the JSONL logs always, wandb when `logger=wandb`.

One wandb run per curriculum run: TRL's own wandb integration would open one per stage, so the
trainers report to "none" and `MetricsCallback` forwards every log line with a global step that
continues across stages, and the stage and its level beside it (`define_metric`: training panels by
global step, validation panels by stage). Its name, group and id come from `train.identity`; tables
(validation samples, training rollouts) go where a tracker keeps them; the sweep objective ends in
the run's summary.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from core.checks import is_number
from core.jsonl import JsonlWriter, NullWriter
from core.rundir import METRICS, VALIDATION, VALIDATION_STEPS
from train.identity import RunIdentity

ROLLOUTS = "rollouts.jsonl"  # training rollouts sampled every `rollouts.every` steps (train/rollouts.py)

log = logging.getLogger(__name__)


class NullTracker:
    """The tracker of `logger=none`: accepts everything, sends nothing."""

    def log(self, row: dict, step: int) -> None:
        pass

    def table(self, key: str, rows: list[dict], step: int) -> None:
        pass

    def summary(self, values: dict) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbTracker:
    """A wandb run, offline when there is no API key (sync it later with `wandb sync`)."""

    def __init__(self, logger: Mapping, run_dir: Path, identity: RunIdentity, run_id: str, config: dict):
        import wandb

        mode = logger.get("mode", "auto")
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        self.wandb = wandb
        self.run = wandb.init(
            project=logger["project"],
            entity=logger.get("entity"),
            name=identity.name,
            group=identity.group,
            job_type=identity.job_type,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            tags=list(logger.get("tags") or []),
            config=config,
            # no ~30-line history panel at the end of every run; where the run is and how to sync it still show
            settings=wandb.Settings(quiet=True),
        )
        # training panels over the global step, validation panels over the stage (one point per stage)
        for metric in ("global_step", "stage"):
            self.run.define_metric(metric, hidden=True)
        for prefix in ("train", "guard", "val_step", "rollouts"):
            self.run.define_metric(f"{prefix}/*", step_metric="global_step")
        self.run.define_metric("val/*", step_metric="stage")

    def log(self, row: dict, step: int) -> None:
        numbers = {k: v for k, v in row.items() if is_number(v)}
        self.run.log({**numbers, "global_step": step}, step=step)

    def table(self, key: str, rows: list[dict], step: int) -> None:
        """`rows` (one dict each, the same keys) as a wandb table under `key`; nested values as JSON text."""
        if not rows:
            return
        columns = list(rows[0])
        data = [[_cell(row.get(c)) for c in columns] for row in rows]
        self.run.log({key: self.wandb.Table(columns=columns, data=data), "global_step": step}, step=step)

    def summary(self, values: dict) -> None:
        self.run.summary.update(values)

    def finish(self) -> None:
        self.run.finish()


def _cell(value):
    """A table cell wandb takes: numbers, text and bools as they are, anything else as JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)


def make_tracker(logger: Mapping, run_dir: Path, identity: RunIdentity, run_id: str, config: dict, *,
                 writes: bool = True):
    """The tracker `logger` (the logger group) names; `config` (the resolved config) is the wandb run's config.
    A process that does not write the run directory (`writes` false: a rank other than the main one) gets a
    NullTracker: one wandb run per curriculum run, whatever the number of processes."""
    backend = logger.get("backend", "none")
    if backend == "wandb" and writes:
        return WandbTracker(logger, run_dir, identity, run_id, config)
    if backend in ("none", "wandb"):
        return NullTracker()
    raise ValueError(f"logger.backend: {backend!r} is not one of wandb, none")


@dataclass(frozen=True)
class RunLogs:
    """Where a run's numbers go, each file through one writer: every trainer log line (`metrics.jsonl`),
    validation after each stage (`validation.jsonl`) and inside one (`validation_steps.jsonl`), sampled
    training rollouts (`rollouts.jsonl`), and the tracker. A resumed run redoes steps after its last
    checkpoint: the keys keep each row once.
    A process that does not write the run directory (`writes` false) drops every row."""

    metrics: JsonlWriter | NullWriter
    validation: JsonlWriter | NullWriter
    validation_steps: JsonlWriter | NullWriter
    tracker: object
    rollouts: JsonlWriter | None = None

    @classmethod
    def open(cls, run_dir: Path, tracker, *, writes: bool = True) -> RunLogs:
        if not writes:
            return cls(NullWriter(), NullWriter(), NullWriter(), tracker)
        return cls(JsonlWriter(run_dir / METRICS, key=("stage", "stage_step", "kind")),
                   JsonlWriter(run_dir / VALIDATION, key=("stage", "level")),
                   JsonlWriter(run_dir / VALIDATION_STEPS, key=("stage", "stage_step", "level")),
                   tracker, JsonlWriter(run_dir / ROLLOUTS, key=("stage", "stage_step", "completion_index")))


class MetricsCallback(TrainerCallback):
    """Every trainer log line to metrics.jsonl (and the tracker), tagged with stage, level and global step."""

    def __init__(self, writer: JsonlWriter, tracker, *, stage_index: int, stage_name: str, level: str,
                 step_offset: int):
        self.writer, self.tracker = writer, tracker
        self.tags = {"stage": stage_index, "stage_name": stage_name, "level": level}
        self.step_offset = step_offset
        # the tracker's `level`: a number for per-stage panels (a mix "2-6ppl" by its mean; else the stage index)
        numbers = [float(n) for n in re.findall(r"\d+", level)]
        self.level_value = sum(numbers) / len(numbers) if numbers else stage_index

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        row = {**self.tags, "stage_step": state.global_step, "global_step": self.step_offset + state.global_step}
        row.update({k: v for k, v in logs.items() if k not in row})
        row["kind"] = "summary" if "train_runtime" in logs else "step"
        self.writer.write([row])
        tracked = {"stage": self.tags["stage"], "level": self.level_value, **{f"train/{k}": v for k, v in logs.items()}}
        self.tracker.log(tracked, step=row["global_step"])

