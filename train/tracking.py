"""Where a run's numbers go: the JSONL logs always, wandb when `logger=wandb`.

One wandb run per curriculum run: TRL's own wandb integration would open one per stage, so the
trainers report to "none" and `MetricsCallback` forwards every log line with a global step that
continues across stages, under the keys TRL's integration gives a GRPO stage (`train/<key>`, as
transformers' WandbCallback rewrites them, with `train/global_step`) or the stage kind's own prefix
(`sft/loss`: `StageKindFacts.tracker_prefix`), and the stage, its kind and its level beside each row
(`define_metric`: training panels by global step, validation panels by stage). The wandb config adds
the run's reward stack and its stages to the resolved config (`tracker_config`). Its name, group and id
come from `train.identity`; tables (validation samples, training rollouts) go where a tracker keeps
them; the sweep objective ends in the run's summary.
"""

from __future__ import annotations

import re
import resource
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from core.rundir.files import METRICS, ROLLOUTS, VALIDATION, VALIDATION_STEPS, JsonlWriter, NullWriter
from core.stage_kinds import StageKindFacts
from core.tracker import open_tracker
from train.identity import RunIdentity
from train.settings import RunSettings

# The prefix transformers' WandbCallback gives a trainer's log keys (`rewrite_logs`), and the keys of a trainer's
# end-of-training line it keeps in the run's summary instead of its history (`WandbCallback.on_log`).
TRL_PREFIX = "train"
SUMMARY_SCALARS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos")
# metrics.jsonl's own columns beside a trainer's log line (`MetricsCallback`)
METRICS_TAGS = ("stage", "stage_name", "level", "stage_step", "global_step", "kind")


def make_tracker(logger: Mapping, run_dir: Path, identity: RunIdentity, run_id: str, config: dict, *,
                 writes: bool = True):
    """The run's tracker (core/tracker.py), named, grouped and typed by its `identity`."""
    return open_tracker(logger, run_dir, name=identity.name, group=identity.group, job_type=identity.job_type,
                        run_id=run_id, config=config, writes=writes)


def tracker_config(settings: RunSettings) -> dict:
    """The wandb run's config: the resolved config, the reward stack as run.json records it (every component with
    its weight and where it came from: `RunSettings.reward_stack`) and each stage's index, name, kind and levels.

    >>> from types import SimpleNamespace
    >>> from curriculum.plan import Stage
    >>> tracker_config(SimpleNamespace(config={"seed": 1}, reward_stack=None,
    ...                                plan=[Stage(1, "sft", "sft", {"2ppl": 1.0}, steps=2, pool=4)]))["stages"]
    [{'index': 1, 'name': 'sft', 'kind': 'sft', 'levels': '2ppl'}]
    """
    stages = [{"index": s.index, "name": s.name, "kind": s.kind, "levels": s.level_label} for s in settings.plan]
    return {**settings.config, "reward_stack": settings.reward_stack, "stages": stages}


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
                 step_offset: int, kind: StageKindFacts):
        self.writer, self.tracker = writer, tracker
        self.tags = {"stage": stage_index, "stage_name": stage_name, "level": level}
        self.step_offset, self.kind = step_offset, kind

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        kind = "summary" if "train_runtime" in logs else "step"
        if kind == "step":  # TRL logs no memory: the report's and the tracker's memory curves
            logs = {**logs, **peak_memory_gib()}
        row = {**self.tags, "stage_step": state.global_step, "global_step": self.step_offset + state.global_step}
        row.update({k: v for k, v in logs.items() if k not in row})
        row["kind"] = kind
        self.writer.write([row])
        send_trainer_line(self.tracker, row, self.kind)


def send_trainer_line(tracker, row: Mapping, kind: StageKindFacts) -> None:
    """One metrics.jsonl row (a trainer's log line and our `METRICS_TAGS`) to the tracker, as it is logged live and
    as a resumed offline run replays it (train/run/replay.py): the end-of-training scalars into the summary, as
    transformers' WandbCallback keeps them (bare for TRL's `train` prefix), the rest at the row's global step."""
    prefix = kind.tracker_prefix
    logs = {k: v for k, v in row.items() if k not in METRICS_TAGS}
    scalars = {k: v for k, v in logs.items() if k in SUMMARY_SCALARS}
    if scalars:
        tracker.summary({(k if prefix == TRL_PREFIX else f"{prefix}/{k}"): v for k, v in scalars.items()})
    tracker.log(tracked_row({k: v for k, v in logs.items() if k not in scalars}, prefix,
                            global_step=row["global_step"], stage=row["stage"], stage_kind=kind.name,
                            level=level_value(row["level"], row["stage"])),
                step=row["global_step"])


def level_value(level: str, stage_index: int) -> float:
    """The tracker's `level`: a number for per-stage panels (a mix "2-6ppl" by its mean; else the stage index).

    >>> level_value("2-6ppl", 3), level_value("mixed", 3)
    (4.0, 3)
    """
    numbers = [float(n) for n in re.findall(r"\d+", level)]
    return sum(numbers) / len(numbers) if numbers else stage_index


def peak_memory_gib() -> dict[str, float]:
    """This process's peak memory so far, in GiB: its resident set (getrusage; KiB on Linux, bytes on macOS) and,
    with CUDA, torch's peak allocated on the current device (`torch.cuda.max_memory_allocated`, never reset, so
    the peak of the whole run up to this step).

    >>> sorted(peak_memory_gib())[-1], peak_memory_gib()["memory/peak_rss_gib"] > 0
    ('memory/peak_rss_gib', True)
    """
    import torch

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    peaks = {"memory/peak_rss_gib": round(rss / 2**30, 3)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peaks["memory/cuda_peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    return peaks


def tracked_row(logs: Mapping, prefix: str, *, global_step: int, stage: int, stage_kind: str, level: float) -> dict:
    """One trainer log line as the tracker gets it: each key under the kind's `prefix` (GRPO's `train/<key>`, as
    transformers' WandbCallback `rewrite_logs` writes TRL's logs), the run's global step as `train/global_step`
    (the step TRL's dashboards plot against; here it continues across stages), and the stage, its kind and its
    level as metadata.

    >>> tracked_row({"reward": 0.5, "kl": 0.01}, "train", global_step=7, stage=2, stage_kind="grpo", level=3.0)
    {'stage': 2, 'stage_kind': 'grpo', 'level': 3.0, 'train/global_step': 7, 'train/reward': 0.5, 'train/kl': 0.01}
    >>> tracked_row({"loss": 1.2}, "sft", global_step=2, stage=1, stage_kind="sft", level=2.0)["sft/loss"]
    1.2
    """
    return {"stage": stage, "stage_kind": stage_kind, "level": level, "train/global_step": global_step,
            **{f"{prefix}/{k}": v for k, v in logs.items()}}

