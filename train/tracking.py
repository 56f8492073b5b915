"""Where a run's numbers go: the JSONL logs always, wandb when `logger=wandb`.

One wandb run per curriculum run: TRL's own wandb integration would open one per stage, so the
trainers report to "none" and `MetricsCallback` forwards every log line with a global step that
continues across stages, and the stage and its level beside it (`define_metric`: training panels by
global step, validation panels by stage). Its name, group and id come from `train.identity`; tables
(validation samples, training rollouts) go where a tracker keeps them; the sweep objective ends in
the run's summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from core.jsonl import JsonlWriter, NullWriter
from core.rundir import METRICS, ROLLOUTS, VALIDATION, VALIDATION_STEPS
from core.tracker import open_tracker
from core.trl_internals import trainer_method_name
from train.identity import RunIdentity


def make_tracker(logger: Mapping, run_dir: Path, identity: RunIdentity, run_id: str, config: dict, *,
                 writes: bool = True):
    """The run's tracker (core/tracker.py), named, grouped and typed by its `identity`."""
    return open_tracker(logger, run_dir, name=identity.name, group=identity.group, job_type=identity.job_type,
                        run_id=run_id, config=config, writes=writes)


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

    def __init__(self, writer: JsonlWriter | NullWriter, tracker, *, stage_index: int, stage_name: str, level: str,
                 step_offset: int):
        self.writer, self.tracker = writer, tracker
        self.tags = {"stage": stage_index, "stage_name": stage_name, "level": level}
        self.step_offset = step_offset
        # the tracker's `level`: a number for per-stage panels (a mix "2-6ppl" by its mean; else the stage index)
        numbers = [float(n) for n in re.findall(r"\d+", level)]
        self.level_value = sum(numbers) / len(numbers) if numbers else stage_index
        self.prefix = "train"  # `bind` adds the trainer's method

    def bind(self, trainer) -> None:
        """The tracker's keys name the trainer's method (TRL's own name for it, "GRPO", "SFT"; else its class):
        `train/sft/loss`, `train/grpo/loss`. An SFT loss (cross-entropy on the reference responses) and a GRPO loss
        (the policy objective, ~0 by construction) are different quantities that must not share one panel."""
        self.prefix = f"train/{trainer_method_name(trainer).lower()}"

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        row = {**self.tags, "stage_step": state.global_step, "global_step": self.step_offset + state.global_step}
        row.update({k: v for k, v in logs.items() if k not in row})
        row["kind"] = "summary" if "train_runtime" in logs else "step"
        self.writer.write([row])
        tracked = {"stage": self.tags["stage"], "level": self.level_value,
                   **{f"{self.prefix}/{k}": v for k, v in logs.items()}}
        self.tracker.log(tracked, step=row["global_step"])

