"""Where a run's numbers go: the JSONL logs always, wandb when `logger=wandb`.

One wandb run per curriculum run (TRL's integration would open one per stage): the trainers report to "none" and
`MetricsCallback` forwards each log line at a global step continuing across stages, under TRL's keys (`train/<key>`)
or the stage kind's prefix (`sft/loss`). `RolloutSampler` samples a few whole groups of a GRPO step's batch every
`rollouts.every` steps; a callback never sees completions, so `bind` takes the batch TRL keeps for its own table
(`core.trl_internals.logged_batch`).
"""

from __future__ import annotations

import logging
import re
import resource
import sys
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from core.rundir.files import METRICS, ROLLOUTS, VALIDATION, VALIDATION_STEPS, JsonlWriter, NullWriter
from core.stage_kinds import StageKindFacts
from core.trl_internals import logged_batch
from curriculum.tasks.base import completion_text
from train.settings import RunSettings

log = logging.getLogger(__name__)

# WandbCallback's prefix of a trainer's log keys, and the end-of-training keys it keeps in the summary, not history
TRL_PREFIX = "train"
SUMMARY_SCALARS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos")
# metrics.jsonl's own columns beside a trainer's log line (`MetricsCallback`)
METRICS_TAGS = ("stage", "stage_name", "level", "stage_step", "global_step", "kind")


def tracker_config(settings: RunSettings) -> dict:
    """The wandb run's config: the resolved config, the reward stack and each stage's index, name, kind, levels.

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
    """Where a run's numbers go: one keyed writer per file, and the tracker; all dropped where not `writes`."""

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


@dataclass(eq=False)  # compared as itself, as the trainer's list of callbacks holds it
class MetricsCallback(TrainerCallback):
    """Every trainer log line to metrics.jsonl (and the tracker), tagged with stage, level and global step."""

    writer: JsonlWriter | NullWriter
    tracker: Any
    _: KW_ONLY
    stage_index: int
    stage_name: str
    level: str
    step_offset: int
    kind: StageKindFacts

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        kind = "summary" if "train_runtime" in logs else "step"
        if kind == "step":  # TRL logs no memory: the report's and the tracker's memory curves
            logs = {**logs, **peak_memory_gib()}
        row = {"stage": self.stage_index, "stage_name": self.stage_name, "level": self.level,
               "stage_step": state.global_step, "global_step": self.step_offset + state.global_step}
        row.update({k: v for k, v in logs.items() if k not in row})
        row["kind"] = kind
        self.writer.write([row])
        send_trainer_line(self.tracker, row, self.kind)


def send_trainer_line(tracker, row: Mapping, kind: StageKindFacts) -> None:
    """One metrics.jsonl row to the tracker, live or replayed (train/run/replay.py): end-of-training scalars into the
    summary as WandbCallback keeps them; the rest at its global step under the kind's prefix, with the stage, kind and
    level (a number for per-stage panels: a mix "2-6ppl" by its mean) beside.

    >>> from core.stage_kinds import STAGE_KIND_FACTS
    >>> class Shown:
    ...     def log(self, row, step): print(step, row)
    >>> send_trainer_line(Shown(), {"stage": 3, "level": "2-6ppl", "global_step": 7, "kind": "step", "reward": 0.5},
    ...                   STAGE_KIND_FACTS["grpo"])
    7 {'stage': 3, 'stage_kind': 'grpo', 'level': 4.0, 'train/global_step': 7, 'train/reward': 0.5}
    """
    prefix = kind.tracker_prefix
    logs = {k: v for k, v in row.items() if k not in METRICS_TAGS}
    scalars = {k: v for k, v in logs.items() if k in SUMMARY_SCALARS}
    if scalars:
        tracker.summary({(k if prefix == TRL_PREFIX else f"{prefix}/{k}"): v for k, v in scalars.items()})
    numbers = [float(n) for n in re.findall(r"\d+", row["level"])]
    level = sum(numbers) / len(numbers) if numbers else row["stage"]
    tracked = {"stage": row["stage"], "stage_kind": kind.name, "level": level, "train/global_step": row["global_step"]}
    tracker.log({**tracked, **{f"{prefix}/{k}": v for k, v in logs.items() if k not in scalars}},
                step=row["global_step"])


def peak_memory_gib() -> dict[str, float]:
    """This process's peak memory so far in GiB: resident set and, with CUDA, torch's peak allocated (never reset).

    >>> sorted(peak_memory_gib())[-1], peak_memory_gib()["memory/peak_rss_gib"] > 0
    ('memory/peak_rss_gib', True)
    """
    import torch

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    peaks = {"memory/peak_rss_gib": round(rss / 2**30, 3)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peaks["memory/cuda_peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    return peaks


def due(step: int, max_steps: int, every: int) -> bool:
    """Sampled at a stage's first and last step and every `every` steps (`every` 0: never).

    >>> [s for s in range(1, 26) if due(s, 25, 10)]
    [1, 10, 20, 25]
    >>> due(1, 5, 0)
    False
    """
    return every > 0 and (step in (1, max_steps) or step % every == 0)


def rollout_rows(batch: Mapping, weights: Mapping[str, float], count: int) -> list[dict]:
    """The first `count` completions of TRL's logged batch: prompt, completion, rewards, weighted reward, advantage.

    >>> batch = {"prompt": ["p", "p"], "completion": ["a", "b"], "advantages": [0.7, -0.7],
    ...          "rewards": {"format_reward": [1.0, 0.0], "answer_reward": [1.0, 0.0]}}
    >>> rows = rollout_rows(batch, {"format_reward": 0.5, "answer_reward": 2.0}, 1)
    >>> rows[0]["rewards"], rows[0]["reward"], rows[0]["advantage"]
    ({'format_reward': 1.0, 'answer_reward': 1.0}, 2.5, 0.7)
    """
    prompts, completions, advantages = list(batch["prompt"]), list(batch["completion"]), list(batch["advantages"])
    rewards = {name: list(values) for name, values in batch["rewards"].items()}
    rows = []
    for i in range(min(count, len(completions))):
        parts = {name: values[i] for name, values in rewards.items() if i < len(values)}
        total = sum(weights.get(name, 1.0) * value for name, value in parts.items() if value is not None)
        rows.append({"completion_index": i, "prompt": completion_text(prompts[i]),
                     "completion": completion_text(completions[i]), "rewards": parts,
                     "reward": round(total, 6), "advantage": advantages[i] if i < len(advantages) else None})
    return rows


@dataclass(eq=False)  # compared as itself, as the trainer's list of callbacks holds it
class RolloutSampler(TrainerCallback):
    """Writes sampled rollouts of a GRPO stage to `writer` and the tracker (`rollouts` table)."""

    writer: Any
    tracker: Any
    _: KW_ONLY
    every: int
    groups: int
    stage_index: int
    stage_name: str
    step_offset: int
    batch: Mapping | None = None  # TRL's logged batch, once bound
    weights: dict[str, float] = field(default_factory=dict)
    group_size: int = 1

    def bind(self, trainer) -> None:
        batch = logged_batch(trainer)
        if batch is None:
            log.warning("rollouts: this TRL version keeps no log of the last batch as TRL 1.16 does; "
                        "training rollouts are not sampled")
            return
        self.batch = batch
        self.group_size = int(trainer.num_generations)
        self.weights = dict(zip(trainer.reward_func_names, trainer.reward_weights.tolist(), strict=True))

    def on_log(self, args, state, control, logs=None, **kwargs):
        step = state.global_step
        if self.batch is None or not logs or "train_runtime" in logs or not due(step, state.max_steps, self.every):
            return
        tags = {"stage": self.stage_index, "stage_name": self.stage_name, "stage_step": step,
                "global_step": self.step_offset + step}
        rows = [{**tags, **row} for row in rollout_rows(self.batch, self.weights, self.groups * self.group_size)]
        self.writer.write(rows)
        self.tracker.table("rollouts/samples", [table_row(row) for row in rows], step=tags["global_step"])


def table_row(row: Mapping) -> dict:
    """A sampled rollout as a tracker table row: a column per reward component (`rewards/` kept where names clash).

    >>> table_row({"prompt": "p", "completion": "c", "rewards": {"format_reward": 1.0, "reward": 0.2}, "reward": 0.7})
    {'prompt': 'p', 'completion': 'c', 'format_reward': 1.0, 'rewards/reward': 0.2, 'reward': 0.7}
    """
    out: dict = {}
    for key, value in row.items():
        if key == "rewards" and isinstance(value, Mapping):
            out.update({(f"rewards/{name}" if name in row else name): part for name, part in value.items()})
        else:
            out[key] = value
    return out
