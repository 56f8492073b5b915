"""Where numbers go beyond the run folder: wandb when `logger=wandb`, nothing with `logger=none`.

Shared by `python -m train` (train/tracking.py: one wandb run per curriculum run, its global step continuing
across stages) and `python -m eval` (one wandb run per validation): a tracker takes rows of numbers, tables
and a summary, and is told who the run is (its name, group, job type and id) by its caller.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from core.checks import is_number


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

    def __init__(self, logger: Mapping, run_dir: Path, *, name: str, group: str | None, job_type: str, run_id: str,
                 config: dict):
        import wandb

        mode = logger.get("mode", "auto")
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        self.wandb = wandb
        self.run = wandb.init(
            project=logger["project"],
            entity=logger.get("entity"),
            name=name,
            group=group,
            job_type=job_type,
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
        for prefix in ("train", "sft", "guard", "val_step", "rollouts"):
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


def open_tracker(logger: Mapping, run_dir: Path, *, name: str, group: str | None, job_type: str, run_id: str,
                 config: dict, writes: bool = True):
    """The tracker `logger` (the logger group) names, writing into `run_dir`; `config` (the resolved config) is the
    wandb run's config. A process that does not write the run directory (`writes` false: a rank other than the main
    one) gets a NullTracker: one wandb run per run, whatever the number of processes."""
    backend = logger.get("backend", "none")
    if backend == "wandb" and writes:
        return WandbTracker(logger, run_dir, name=name, group=group, job_type=job_type, run_id=run_id, config=config)
    if backend in ("none", "wandb"):
        return NullTracker()
    raise ValueError(f"logger.backend: {backend!r} is not one of wandb, none")
