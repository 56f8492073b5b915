"""What every stage kind shares: what it is given, the shape it fills in, and train -> publish.

A kind (GRPO in `train/grpo_stage.py`, SFT in `train/sft_stage.py`, looked up by name in
`train/stage_kinds.py`) says only what differs: its rows, its checks, its trainer. `run_stage`
does the rest the same way for each: fingerprint the start, train (resuming a killed run's last
complete checkpoint), save full weights (LoRA merged) and publish `stages/<k>-<name>/final`.

With many processes every rank runs all of it: the trainer needs them all, and its `save_model`
gathers full weights where ZeRO-3 or FSDP shard them. The weights each rank ends with are
fingerprinted and compared (data parallelism keeps them equal); the main process alone writes the
final and its `stage.json`, and every rank waits until the final is in place.

Checkpoints on disk (the second half of the file, and `train/checkpoints.py`): a trainer checkpoint
counts only once it is complete and its files match the digests recorded after its save; a stage's
final is written to a temporary folder and renamed, with `stage.json` (holding its files' digests)
inside, so a kill during either save never leaves a half checkpoint that a resume would pick up, and
a damaged one is never used.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from transformers import Trainer, TrainerState
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME

from core.checks import ConfigError, is_int, is_number
from core.distributed import Processes, barrier, broadcast, gather
from core.jsonl import JsonlWriter
from core.models import LORA_LEARNING_RATE, device_settings, merged_lora
from core.published import FINAL_MARKER, final_digests, marker_digest
from core.rundir import final_checkpoint, stage_path
from core.stage_kinds import StageKindFacts
from core.weights import checkpoint_weights, fingerprint, gather_weights, save_whole, weights_fingerprint
from curriculum.plan import Stage
from curriculum.prompts import prompt_ids
from curriculum.tasks.base import Task
from train.checkpoints import CheckpointDigests
from train.exact_start import exact_start
from train.tracking import MetricsCallback, bind_to_trainer

# Set by the runner per stage; a config that sets them would be silently overridden.
RUNNER_OWNED = {"output_dir", "max_steps", "report_to", "bf16", "use_cpu", "model_init_kwargs", "reward_weights"}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KindSettings:
    """What a stage kind reads besides its own config group (`grpo`, `sft`): plain copies of these groups."""

    prompt: Mapping  # rows are rendered with it; its `fmt` is the format the grader reads
    model: Mapping  # chat, chat_template_kwargs, context_length, lora
    reward: Mapping  # the reward group (GRPO's reward functions)
    seed: int  # each stage's trainer is seeded with seed + its index
    world_size: int = 1  # processes training each step: TRL's batch arithmetic counts them
    task: Task | None = None  # the run's task: its reward functions (kk: the reward group's components)


@dataclass
class StageContext:
    """What a stage needs from the run around it."""

    run_dir: Path
    init_model: str  # the checkpoint this stage starts from
    reference_model: str | None  # the checkpoint TRL's reference holds (None: beta 0, no reference)
    step_offset: int  # global steps done before this stage
    config_hash: str  # of the run's config: its final's stage.json names it (a resume adopts only its own)
    task: str  # the run's task (its name): its final's stage.json names it (python -m eval checks it)
    keep_trainer_checkpoints: bool
    metrics: JsonlWriter
    tracker: object
    processes: Processes  # every rank trains the stage; the main process writes its final
    callbacks: list = field(default_factory=list)  # more TrainerCallbacks (the stage end's, a caller's)
    resume_from: Path | None = None  # the trainer checkpoint a killed run left, complete and intact (resume)
    reward_warning: Callable[[dict], None] | None = None  # records a reward's warning in run.json (reward_checks)


@dataclass(frozen=True)
class StageResult:
    """What training a stage produced, as run.json records it; its final's `stage.json` holds most of it."""

    checkpoint: str  # its final, relative to the run directory (a run directory may be moved)
    steps_done: int
    policy_fingerprint: str | None  # of the weights it started from
    reference: str | None  # the checkpoint its KL is measured against
    reference_fingerprint: str | None
    resumed_from: str | None = None  # the trainer checkpoint it continued from
    wall_seconds: float | None = None  # training and publishing (None: a final adopted after a kill)
    final_fingerprints: list[str] | None = None  # of the weights it ended with, per rank (gathered where sharded)
    distributed: dict | None = None  # how its trainer ran (`distributed_record`)
    final_marker: str | None = None  # sha256 of the published final's stage.json (core/published.py)

    def marker(self, stage_name: str, config_hash: str, task: str, init: str) -> dict:
        """The final's `stage.json`: which stage of which config and task it is, where it started, and this result."""
        return {"stage": stage_name, "config_hash": config_hash, "task": task, "steps_done": self.steps_done,
                "init": init,
                "policy_fingerprint": self.policy_fingerprint, "reference": self.reference,
                "reference_fingerprint": self.reference_fingerprint, "final_fingerprints": self.final_fingerprints,
                "distributed": self.distributed}

    @classmethod
    def from_marker(cls, checkpoint: str, info: Mapping, final_marker: str) -> StageResult:
        """The result a published final's `stage.json` (of sha256 `final_marker`) holds (nothing of how long it
        took)."""
        return cls(checkpoint, int(info["steps_done"]), info.get("policy_fingerprint"), info.get("reference"),
                   info.get("reference_fingerprint"), final_fingerprints=info.get("final_fingerprints"),
                   distributed=info.get("distributed"), final_marker=final_marker)


class StageKind(Protocol):
    """What one kind of stage (`kind:` in a curriculum) brings; `run_stage` does the rest.

    A kind is built from its config group (`cfg.<name>`) and the `KindSettings` every kind shares.
    """

    facts: StageKindFacts  # its name, label, step cap, whether it learns from rewards (`reference: rl_start`)

    def rows(self, records: list[dict], tokenizer):
        """The stage's training rows (a datasets.Dataset) from its pool's records."""

    def check(self, stage: Stage, key: str) -> None:
        """Raise ConfigError naming the key (under `key`, the stage's overrides) before any model loads."""

    def check_lengths(self, stage: Stage, rows, tokenizer) -> None:
        """Raise ConfigError if a row does not fit the kind's token budget (nothing is truncated silently)."""

    def has_reference(self, stage: Stage) -> bool:
        """Whether the stage's loss holds the policy to a reference model (GRPO's KL term)."""

    def trainer(self, stage: Stage, ctx: StageContext, rows, output_dir: Path, callbacks: list) -> Trainer:
        """The TRL trainer for the stage, its policy loaded from `ctx.init_model`."""

    def reference_fingerprint(self, trainer: Trainer) -> str | None:
        """The fingerprint of the weights the loss measures KL against, or None."""


def run_stage(kind: StageKind, stage: Stage, ctx: StageContext, rows) -> StageResult:
    """Train one stage of `kind` and publish `stages/<k>-<name>/final`."""
    began = time.time()
    stage_dir = stage_path(ctx.run_dir, stage.dirname)
    metrics = MetricsCallback(ctx.metrics, ctx.tracker, stage_index=stage.index, stage_name=stage.name,
                              level=stage.level_label, step_offset=ctx.step_offset)
    trainer = kind.trainer(stage, ctx, rows, stage_dir / "trainer",
                           [metrics, CheckpointDigests(ctx.processes), *ctx.callbacks])
    bind_to_trainer(trainer)  # the run's console and rollout sampler, in place of the trainer's printers
    # The weights it starts from (a resume loads its checkpoint into the policy later), gathered where ZeRO-3
    # partitions them: every rank computes the same fingerprints. DeepSpeed's start is set exactly (bf16 casts).
    start = exact_start(trainer, ctx.init_model) if trainer.is_deepspeed_enabled else fingerprint(trainer.model)
    reference = kind.reference_fingerprint(trainer)
    resumed_from, adopted = resume_and_train(trainer, ctx.resume_from, stage.name)
    model = merged_lora(trainer.model)  # what the final holds: full weights (LoRA merged in place)
    final = final_weights(trainer, model, adopted, ctx.processes)
    ends = rank_fingerprints(final.fingerprint, stage.name, ctx.processes)
    result = StageResult(str(final_checkpoint(stage.dirname)), trainer.state.global_step, start, ctx.reference_model,
                         reference, resumed_from, final_fingerprints=ends, distributed=distributed_record(trainer))
    publish_stage(trainer, model, final.weights, stage_dir,
                  result.marker(stage.name, ctx.config_hash, ctx.task, ctx.init_model),
                  keep_trainer_checkpoints=ctx.keep_trainer_checkpoints, processes=ctx.processes)
    # every rank reads the marker the main process wrote (the final is in place for all of them)
    return dataclasses.replace(result, wall_seconds=round(time.time() - began, 2),
                               final_marker=marker_digest(stage_dir / "final"))


def distributed_record(trainer: Trainer) -> dict:
    """How a stage's trainer ran, as accelerate set it up: its distributed type (what ran, not what a launch file
    asked for: accelerate makes a launch FSDP only on GPUs, and DDP on a CPU), processes, mixed precision and
    ZeRO stage (DeepSpeed).

    >>> from types import SimpleNamespace as NS
    >>> state = NS(distributed_type=NS(value="MULTI_CPU"), num_processes=2, mixed_precision="no")
    >>> distributed_record(NS(accelerator=NS(state=state), is_deepspeed_enabled=False))
    {'type': 'MULTI_CPU', 'processes': 2, 'mixed_precision': 'no'}
    """
    state = trainer.accelerator.state
    record = {"type": str(state.distributed_type.value), "processes": state.num_processes,
              "mixed_precision": str(state.mixed_precision)}
    if trainer.is_deepspeed_enabled:
        record["zero_stage"] = state.deepspeed_plugin.zero_stage
    return record


@dataclass(frozen=True)
class FinalWeights:
    """What a stage's final will hold: its fingerprint on this rank, and (on the main process, when the module's
    own weights are not them: an engine's float32 master copy, or a DeepSpeed checkpoint's) the whole weights."""

    fingerprint: str
    weights: dict[str, torch.Tensor] | None = None  # None: save the module as it is (one process, DDP, LoRA merged)


def final_weights(trainer: Trainer, model, adopted: Path | None, processes: Processes) -> FinalWeights:
    """The final's weights: a DeepSpeed checkpoint's master weights (`adopted`, read on the main process, its
    fingerprint handed to every rank), the engine's gathered master copy (DeepSpeed, FSDP), or the module."""
    if adopted is not None:
        names = [name for name, _ in model.named_parameters()]
        weights = checkpoint_weights(adopted, names) if processes.is_main else None
        found = weights_fingerprint(weights.items()) if weights is not None else None
        return FinalWeights(broadcast(found, processes), weights)
    if not (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled):
        return FinalWeights(fingerprint(model))
    found, weights = gather_weights(model.named_parameters(), keep=processes.is_main)
    return FinalWeights(found, weights)


def rank_fingerprints(found: str, stage_name: str, processes: Processes) -> list[str]:
    """The final weights' fingerprint on every rank, in rank order; an error if they differ (data parallelism
    keeps every rank's copy equal: a difference means the ranks trained apart, and no final is published)."""
    prints = gather(found, processes)
    if len(set(prints)) > 1:
        raise RuntimeError(f"stage {stage_name}: the ranks end with different weights (fingerprints {prints}); "
                           "no final is published")
    return prints


def trainer_fields(section: Mapping, stage: Stage, *, seed: int, output_dir: Path, lora: Mapping | None,
                   config_class: type) -> dict:
    """A trainer config's fields: the kind's config group, LoRA's rate, the stage's overrides, then the runner's,
    under the names the installed transformers gives them (`installed_names`).

    Adapters train at their own, larger rate (TRL's PEFT docs: about 10x); a stage's overrides still win.
    """
    device = device_settings()
    fields = {"optim": device["optim"], **section}
    if lora:
        fields["learning_rate"] = float(lora.get("learning_rate") or LORA_LEARNING_RATE)
    fields.update(stage.overrides)
    fields.update(
        output_dir=str(output_dir),
        max_steps=stage.steps,
        seed=seed + stage.index,
        report_to="none",
        bf16=device["bf16"],
        use_cpu=device["use_cpu"],
        model_init_kwargs={"dtype": str(device["dtype"]).removeprefix("torch.")},
        save_strategy="steps",
    )
    return installed_names(fields, config_class)


# transformers 5.24 renamed these TrainingArguments fields (the old names stay as deprecated aliases); vLLM 0.31,
# the newest TRL 1.16 accepts, needs transformers < 5.18, which knows only the old ones. The configs use the new.
RENAMED_FIELDS = {"activation_checkpointing": "gradient_checkpointing",
                  "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs"}


def installed_names(fields: Mapping, config_class: type) -> dict:
    """`fields` with each renamed field under the name `config_class` (the installed TRL/transformers) knows.

    >>> Old = dataclasses.make_dataclass("Old", ["gradient_checkpointing", "seed"])  # transformers before 5.24
    >>> installed_names({"activation_checkpointing": True, "seed": 1}, Old)
    {'gradient_checkpointing': True, 'seed': 1}
    """
    known = {spec.name for spec in dataclasses.fields(config_class)}
    return {(RENAMED_FIELDS[k] if k in RENAMED_FIELDS and k not in known else k): v for k, v in fields.items()}


def check_trainer_fields(fields: Mapping, config_class: type, key: str) -> None:
    """Every field a config sets is a field of the trainer's config (TRL's dataclass), with a value of its type
    where that is a plain one (bool, int, float, str, or one of them or null), not one the runner sets, and not
    a warmup."""
    known = {spec.name: spec.type for spec in dataclasses.fields(config_class)}
    for name, value in installed_names(fields, config_class).items():
        if name not in known:
            raise ConfigError(f"{key}.{name}: not a {config_class.__name__} field (TRL)")
        if name in RUNNER_OWNED:
            raise ConfigError(f"{key}.{name}: set by the runner per stage; use limits.max_steps or the stage's steps")
        expected = _plain_type(known[name])
        if expected and not _fits(value, *expected):
            raise ConfigError(f"{key}.{name}: {value!r} is not {SCALARS[expected[0]]} ({config_class.__name__})")
    # Every optimizer step must update the policy; transformers' warmup spends the first at learning rate 0.
    if (fields.get("warmup_steps") or 0) > 0:
        raise ConfigError(f"{key}.warmup_steps: {fields['warmup_steps']} > 0 makes the stage's first optimizer step "
                          "run at learning rate 0 (transformers' warmup starts from 0); use 0")
    check_sampling(fields, key)


# The sampling fields of a trainer that generates (GRPOConfig), with the values they may take: TRL divides the
# logits by `temperature` and transformers checks the others only when it first generates, after the baseline
# validation (grpo.temperature=0 ended there in a 121-line traceback).
SAMPLING_RANGES = {
    "temperature": (lambda v: v > 0, "> 0 (TRL divides the logits by it; GRPO needs sampled, differing completions)"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1] (1: every token)"),
    "top_k": (lambda v: v >= 0, ">= 0 (0: no top-k filter)"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1], or null"),
    "repetition_penalty": (lambda v: v > 0, "> 0 (1: none)"),
}


def check_sampling(fields: Mapping, key: str) -> None:
    """Each sampling field `fields` sets (a number: its type is checked before) is finite and in its range."""
    for name, (fits, wanted) in SAMPLING_RANGES.items():
        value = fields.get(name)
        if is_number(value) and not (is_number(value, finite=True) and fits(value)):
            raise ConfigError(f"{key}.{name}: must be {wanted} (got {value!r})")


# The field types a value is checked against; others (`str | list[str]`, enums of transformers) are TRL's to check.
SCALARS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _plain_type(annotation) -> tuple[type, bool] | None:
    """(type, whether null is allowed) for `int` or `int | None` and the like; None for any other annotation."""
    if annotation in SCALARS:
        return annotation, False
    args = set(typing.get_args(annotation))
    others = args - {type(None)}
    if type(None) in args and len(others) == 1 and next(iter(others)) in SCALARS:
        return next(iter(others)), True
    return None


def _fits(value, expected: type, nullable: bool) -> bool:
    if value is None:
        return nullable
    if expected in (bool, str):
        return isinstance(value, expected)
    return is_number(value) if expected is float else is_int(value)


def token_counts(texts: list[str], tokenizer) -> list[int]:
    """How many tokens each text is, tokenized as TRL's trainers tokenize it (`prompt_ids`)."""
    return [len(prompt_ids(text, tokenizer)) for text in texts]


def resume_and_train(trainer, resume_from: Path | None, stage_name: str) -> tuple[str | None, Path | None]:
    """Train, continuing from `resume_from` (the stage's last complete, intact trainer checkpoint) if given.
    Returns the checkpoint resumed from, and the DeepSpeed checkpoint to publish as it is (else None).

    A checkpoint already at the budget (a kill while the final was written) is loaded, not trained
    on: training it again would run a step past `max_steps` and shift every later global step. A
    DeepSpeed one is not loaded at all: only `train()` builds DeepSpeed's engine, which loading needs; its
    master weights are read from its files instead (`core.weights.checkpoint_weights`).
    """
    if resume_from is None:
        trainer.train()
        return None, None
    state = TrainerState.load_from_json(str(resume_from / TRAINER_STATE_NAME))
    if state.global_step < trainer.args.max_steps:
        log.info("stage %s: resuming from %s", stage_name, resume_from)
        trainer.train(resume_from_checkpoint=str(resume_from))
        return str(resume_from), None
    log.info("stage %s: %s is at the budget; publishing it without training", stage_name, resume_from)
    trainer.state = state
    if trainer.is_deepspeed_enabled:
        return str(resume_from), resume_from
    trainer._load_from_checkpoint(str(resume_from))
    return str(resume_from), None


def publish_stage(trainer: Trainer, model, weights: dict | None, stage_dir: Path, info: dict, *,
                  keep_trainer_checkpoints: bool, processes: Processes) -> None:
    """Save the final to `final.tmp`, publish it as `final`, prune trainer checkpoints.

    `weights` (on the main process): whole float32 weights an engine kept apart from the module (DeepSpeed's
    master copy, FSDP's gathered shards), saved as a model of the module's architecture. Otherwise `model`
    itself: through the trainer (`save_model`, on every rank) when it is the trainer's, or by the main
    process (a merged LoRA model, whole on every rank).
    """
    tmp = stage_dir / "final.tmp"
    if processes.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
    barrier(processes)
    if weights is not None:
        save_whole(model.config, weights, trainer.processing_class, tmp)
    elif model is trainer.model and not (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled):
        trainer.save_model(str(tmp))
    elif processes.is_main and model is not trainer.model:
        model.save_pretrained(tmp)
        trainer.processing_class.save_pretrained(tmp)
    barrier(processes)  # the main process has every file of the final
    if processes.is_main:
        (tmp / TRAINING_ARGS_NAME).unlink(missing_ok=True)  # a pickle of the trainer's arguments: nothing reads it
        publish_final(tmp, stage_dir / "final", info)
        if not keep_trainer_checkpoints:
            shutil.rmtree(stage_dir / "trainer", ignore_errors=True)
    barrier(processes)  # the final is in place for every rank (the next stage, validation)


def publish_final(tmp_dir: Path, final_dir: Path, info: dict) -> None:
    """Mark `tmp_dir` complete (its files' digests in the marker) and move it to `final_dir` in one rename."""
    (tmp_dir / FINAL_MARKER).write_text(json.dumps({**info, "files": final_digests(tmp_dir)}, indent=2))
    if final_dir.exists():  # an earlier final without a marker, or damaged: never handed off
        shutil.rmtree(final_dir)
    os.replace(tmp_dir, final_dir)
