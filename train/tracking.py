"""Where a run's numbers go: the JSONL logs always, wandb when `logger=wandb`.

One wandb run per curriculum run: TRL's own wandb integration would open one per stage, so the
trainers report to "none" and `MetricsCallback` forwards every log line with a global step that
continues across stages.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from core.checks import is_number
from core.rundir import METRICS, VALIDATION, VALIDATION_STEPS, JsonlWriter, NullWriter

log = logging.getLogger(__name__)


class NullTracker:
    """The tracker of `logger=none`: accepts everything, sends nothing."""

    def log(self, row: dict, step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbTracker:
    """A wandb run, offline when there is no API key (sync it later with `wandb sync`)."""

    def __init__(self, logger: Mapping, run_dir: Path, run_id: str, config: dict):
        import wandb

        mode = logger.get("mode", "auto")
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        self.wandb = wandb
        self.run = wandb.init(
            project=logger["project"],
            entity=logger.get("entity"),
            name=run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            tags=list(logger.get("tags") or []),
            config=config,
        )

    def log(self, row: dict, step: int) -> None:
        numbers = {k: v for k, v in row.items() if is_number(v)}
        self.run.log(numbers, step=step)

    def finish(self) -> None:
        self.run.finish()


def make_tracker(logger: Mapping, run_dir: Path, run_id: str, config: dict, *, writes: bool = True):
    """The tracker `logger` (the logger group) names; `config` (the resolved config) is the wandb run's config.
    A process that does not write the run directory (`writes` false: a rank other than the main one) gets a
    NullTracker: one wandb run per curriculum run, whatever the number of processes."""
    backend = logger.get("backend", "none")
    if backend == "wandb" and writes:
        return WandbTracker(logger, run_dir, run_id, config)
    if backend in ("none", "wandb"):
        return NullTracker()
    raise ValueError(f"logger.backend: {backend!r} is not one of wandb, none")


@dataclass(frozen=True)
class RunLogs:
    """Where a run's numbers go, each file through one writer: every trainer log line (`metrics.jsonl`),
    validation after each stage (`validation.jsonl`) and inside one (`validation_steps.jsonl`), and
    the tracker. A resumed run redoes steps after its last checkpoint: the keys keep each row once.
    A process that does not write the run directory (`writes` false) drops every row."""

    metrics: JsonlWriter | NullWriter
    validation: JsonlWriter | NullWriter
    validation_steps: JsonlWriter | NullWriter
    tracker: object

    @classmethod
    def open(cls, run_dir: Path, tracker, *, writes: bool = True) -> RunLogs:
        if not writes:
            return cls(NullWriter(), NullWriter(), NullWriter(), tracker)
        return cls(JsonlWriter(run_dir / METRICS, key=("stage", "stage_step", "kind")),
                   JsonlWriter(run_dir / VALIDATION, key=("stage", "ppl")),
                   JsonlWriter(run_dir / VALIDATION_STEPS, key=("stage", "stage_step", "ppl")),
                   tracker)


class MetricsCallback(TrainerCallback):
    """Every trainer log line to metrics.jsonl (and the tracker), tagged with stage, ppl and global step."""

    def __init__(self, writer: JsonlWriter, tracker, *, stage_index: int, stage_name: str, ppl: str, step_offset: int):
        self.writer, self.tracker = writer, tracker
        self.tags = {"stage": stage_index, "stage_name": stage_name, "ppl": ppl}
        self.step_offset = step_offset

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        row = {**self.tags, "stage_step": state.global_step, "global_step": self.step_offset + state.global_step}
        row.update({k: v for k, v in logs.items() if k not in row})
        row["kind"] = "summary" if "train_runtime" in logs else "step"
        self.writer.write([row])
        self.tracker.log({f"train/{k}": v for k, v in logs.items()}, step=row["global_step"])
