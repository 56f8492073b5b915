"""Training one stage, the same way for every kind (`run_stage`): fingerprint the start, train (resuming a
killed run's last complete checkpoint), save full weights (LoRA merged) and publish
`stages/<k>-<name>/final`. A kind brings only its trainer (`train/stages/base.py` `StageKind`).

With many processes every rank runs all of it: the trainer needs them all, and its `save_model`
gathers full weights where ZeRO-3 or FSDP shard them. The weights each rank ends with are
fingerprinted and compared (data parallelism keeps them equal); the main process alone writes the
final and its `stage.json`, and every rank waits until the final is in place.

Checkpoints on disk (the second half of this file, and `train/stages/checkpoints.py`): a trainer checkpoint
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
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import Trainer, TrainerState
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME

from core.distributed import Processes, barrier, broadcast, gather
from core.models import merged_lora
from core.rundir.files import final_checkpoint, stage_path
from core.rundir.records import FINAL_MARKER, StageResult, final_digests, marker_digest
from core.trl_internals import load_checkpoint_weights
from core.weights import checkpoint_weights, fingerprint, gather_weights, save_whole, weights_fingerprint
from curriculum.plan import Stage
from train.stages.base import StageContext, StageKind
from train.stages.exact_start import start_fingerprint

log = logging.getLogger(__name__)


def run_stage(kind: StageKind, stage: Stage, ctx: StageContext, rows) -> StageResult:
    """Train one stage of `kind` and publish `stages/<k>-<name>/final`."""
    began = time.time()
    stage_dir = stage_path(ctx.run_dir, stage.dirname)
    trainer = kind.trainer(stage, ctx, rows, stage_dir / "trainer")
    try:
        bind_to_trainer(trainer)
        start = start_fingerprint(trainer)
        reference = kind.reference_fingerprint(trainer)
        resumed_from, adopted = resume_and_train(trainer, ctx, stage.name)
        model = merged_lora(trainer.model)  # what the final holds: full weights (LoRA merged in place)
        final = final_weights(trainer, model, adopted, ctx.processes)
        ends = rank_fingerprints(final.fingerprint, stage.name, ctx.processes)
        result = StageResult(str(final_checkpoint(stage.dirname)), trainer.state.global_step, start,
                             ctx.reference_model, reference, resumed_from, final_fingerprints=ends,
                             distributed=distributed_record(trainer))
        publish_stage(trainer, model, final.weights, stage_dir,
                      result.marker(stage.name, ctx.config_hash, ctx.task, ctx.init_model),
                      keep_trainer_checkpoints=ctx.keep_trainer_checkpoints, processes=ctx.processes)
    finally:
        release_from_trainer(trainer)
    # every rank reads the marker the main process wrote (the final is in place for all of them)
    return dataclasses.replace(result, wall_seconds=round(time.time() - began, 2),
                               final_marker=marker_digest(stage_dir / "final"))


def bind_to_trainer(trainer: Trainer) -> None:
    """Hand the trainer to the callbacks that need more than a callback sees (`bind(trainer)`: the console
    takes the trainer's printers, the rollout sampler reads TRL's own log of the last batch, in-stage
    validation borrows a colocated vLLM engine, DeepSpeed's exact start reads the engine's parameters), and
    drop TRL's per-checkpoint model card: nobody reads it (trainer checkpoints are pruned), and drafting it
    reads `wandb.run.url`, which prints "URL not available in offline run" at every checkpoint."""
    trainer.create_model_card = _no_model_card
    for callback in list(trainer.callback_handler.callbacks):
        if callable(getattr(callback, "bind", None)):
            callback.bind(trainer)


def release_from_trainer(trainer: Trainer) -> None:
    """The stage's teardown, however it ended (published, or raised): the callbacks that hold something open for
    the trainer give it back (`release()`: the weight-sync group with a vLLM server, train/stages/weight_sync.py),
    since a callback's `on_train_end` never runs when training raises."""
    for callback in list(trainer.callback_handler.callbacks):
        if callable(getattr(callback, "release", None)):
            callback.release()


def _no_model_card(*args, **kwargs) -> None:
    return None


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


def resume_and_train(trainer, ctx: StageContext, stage_name: str) -> tuple[str | None, Path | None]:
    """Train, continuing from `ctx.resume_from` (the stage's last complete, intact trainer checkpoint) if given.
    Returns the checkpoint resumed from, and the DeepSpeed checkpoint to publish as it is (else None).

    A checkpoint already at the budget (`ctx.resume_at_budget`: a kill while the final was written) is loaded,
    not trained on: training it again would run a step past `max_steps` and shift every later global step. A
    DeepSpeed one is not loaded at all: only `train()` builds DeepSpeed's engine, which loading needs; its
    master weights are read from its files instead (`core.weights.checkpoint_weights`).
    """
    resume_from = ctx.resume_from
    if resume_from is None:
        trainer.train()
        return None, None
    if not ctx.resume_at_budget:
        log.info("stage %s: resuming from %s", stage_name, resume_from)
        trainer.train(resume_from_checkpoint=str(resume_from))
        return str(resume_from), None
    log.info("stage %s: %s is at the budget; publishing it without training", stage_name, resume_from)
    trainer.state = TrainerState.load_from_json(str(resume_from / TRAINER_STATE_NAME))
    if trainer.is_deepspeed_enabled:
        return str(resume_from), resume_from
    load_checkpoint_weights(trainer, str(resume_from))
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
