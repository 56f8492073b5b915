"""Where a run's numbers go: metrics.jsonl always, wandb when `logger=wandb`.

One wandb run per curriculum run: TRL's own wandb integration would open one per stage, so the
trainers report to "none" and `MetricsCallback` forwards every log line with a global step that
continues across stages.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import TrainerCallback

from core.checks import is_number
from core.rundir import JsonlWriter

log = logging.getLogger(__name__)


class NullTracker:
    """The tracker of `logger=none`: accepts everything, sends nothing."""

    def log(self, row: dict, step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbTracker:
    """A wandb run, offline when there is no API key (sync it later with `wandb sync`)."""

    def __init__(self, cfg: DictConfig, run_dir: Path, run_id: str):
        import wandb

        mode = cfg.logger.get("mode", "auto")
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        self.wandb = wandb
        self.run = wandb.init(
            project=cfg.logger.project,
            entity=cfg.logger.get("entity"),
            name=run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            tags=list(cfg.logger.get("tags") or []),
            config=OmegaConf.to_container(cfg, resolve=True),
        )

    def log(self, row: dict, step: int) -> None:
        numbers = {k: v for k, v in row.items() if is_number(v)}
        self.run.log(numbers, step=step)

    def finish(self) -> None:
        self.run.finish()


def make_tracker(cfg: DictConfig, run_dir: Path, run_id: str):
    backend = cfg.logger.get("backend", "none")
    if backend == "wandb":
        return WandbTracker(cfg, run_dir, run_id)
    if backend == "none":
        return NullTracker()
    raise ValueError(f"logger.backend: {backend!r} is not one of wandb, none")


class NonFiniteLossError(RuntimeError):
    """The loss or the weights became NaN or inf; the stage stops and its last good checkpoint stays."""


def _stop_diverged(stage_name: str, what: str, step: int) -> None:
    raise NonFiniteLossError(
        f"stage {stage_name}: {what} became non-finite (nan/inf) at step {step}; the stage stops before "
        "saving it, and the last good checkpoint is kept (lower the learning rate or check the reward)"
    )


def _all_finite(model) -> bool:
    """One device sync for the whole model, not one per tensor (this runs after every step)."""
    with torch.no_grad():
        return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


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
        loss = logs.get("loss")
        if isinstance(loss, float) and not math.isfinite(loss):
            _stop_diverged(self.tags["stage_name"], f"the loss ({loss})", state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # Checked after each optimizer step and before the trainer saves it: diverged weights would
        # otherwise crash the next generation (NaN probabilities) or be handed to the next stage.
        if model is not None and not _all_finite(model):
            _stop_diverged(self.tags["stage_name"], "the weights", state.global_step)
