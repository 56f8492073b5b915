"""What a stage kind is given (`KindSettings`, `StageContext`) and the `StageKind` protocol it fills in: only what
differs (rows, checks, trainer); `run_stage` does the rest the same way for each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from transformers import Trainer

from core.distributed import Processes
from core.stage_kinds import StageKindFacts
from curriculum.plan import Stage
from curriculum.tasks.base import Task, TaskRecord
from eval.vllm_engine import ProcessEngine


@dataclass(frozen=True)
class KindSettings:
    """What a stage kind reads besides its own config group (`grpo`, `sft`): plain copies of these groups."""

    prompt: Mapping  # rows are rendered with it; its `fmt` is the format the grader reads
    model: Mapping  # chat, chat_template_kwargs, context_length, lora
    reward: Mapping  # the reward group (GRPO's reward functions)
    seed: int  # each stage's trainer is seeded with seed + its index
    world_size: int = 1  # processes training each step: TRL's batch arithmetic counts them
    task: Task | None = None  # the run's task: its reward functions (kk: the reward group's components)
    # the reward functions and weights at `grpo.max_completion_length`; a stage overriding the length builds its own
    rewards: tuple[Sequence[Callable], Sequence[float]] = ((), ())


@dataclass(frozen=True, kw_only=True)
class StageContext:
    """What a stage needs from the run around it (by keyword: several fields share a type)."""

    run_dir: Path
    init_model: str  # the checkpoint this stage starts from
    reference_model: str | None  # the checkpoint TRL's reference holds (None: beta 0, no reference)
    config_hash: str  # of the run's config: its final's stage.json names it (a resume adopts only its own)
    task: str  # the run's task (its name): its final's stage.json names it (python -m eval checks it)
    keep_trainer_checkpoints: bool
    processes: Processes  # every rank trains the stage; the main process writes its final
    callbacks: list  # every TrainerCallback of its trainer, in order (the runner's `stage_callbacks`)
    resume_from: Path | None = None  # the trainer checkpoint a killed run left, complete and intact (resume)
    resume_at_budget: bool = False  # `resume_from` is at the stage's budget: published as it is, no step trained
    reward_warning: Callable[[dict], None] | None = None  # a reward's warning into run.json (train/rewards/checks.py)
    engine: ProcessEngine | None = None  # the process's vLLM engine, which a colocated trainer rolls out through


class StageKind(Protocol):
    """What one kind of stage (`kind:` in a curriculum) brings, built from its config group and `KindSettings`."""

    facts: ClassVar[StageKindFacts]  # its name, label, step cap, whether it learns from rewards

    def __init__(self, group: Mapping, shared: KindSettings, /) -> None:
        """The kind from its own config group (plain) and the settings every kind shares."""

    def rows(self, records: list[TaskRecord], tokenizer):
        """The stage's training rows (a datasets.Dataset) from its pool's records."""

    def check(self, stage: Stage, key: str) -> None:
        """Raise ConfigError naming the key (under `key`, the stage's overrides) before any model loads."""

    def check_lengths(self, stage: Stage, rows, tokenizer) -> None:
        """Raise ConfigError if a row does not fit the kind's token budget (nothing is truncated silently)."""

    def has_reference(self, stage: Stage) -> bool:
        """Whether the stage's loss holds the policy to a reference model (GRPO's KL term)."""

    def rollout_engine(self, stage: Stage, rank: int) -> dict | None:
        """The arguments of the vLLM engine the stage's trainer rolls out through here (colocate mode), or None."""

    def trainer(self, stage: Stage, ctx: StageContext, rows, output_dir: Path) -> Trainer:
        """The TRL trainer for the stage, its policy loaded from `ctx.init_model`, with `ctx.callbacks`."""

    def reference_fingerprint(self, trainer: Trainer) -> str | None:
        """The fingerprint of the weights the loss measures KL against, or None."""
