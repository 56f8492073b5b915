"""One stage, the same way for every kind (`run_stage`): fingerprint the start, train (resuming a killed attempt's
last complete checkpoint), save full weights (LoRA merged) and publish `stages/<k>-<name>/final`; the callbacks bound
to its trainer; its trainer checkpoints on disk. Every rank runs all of it; the main process alone writes the final
(to `final.tmp`, its marker last, then renamed) and a checkpoint counts once its digests match: a kill mid-save never
leaves a half checkpoint a resume would take.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainerState
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from core.distributed import SINGLE, Processes, barrier, broadcast, gather
from core.models import merged_lora
from core.rundir.files import final_checkpoint, load_file, stage_path, write_json_atomic
from core.rundir.records import (
    DIGESTS,
    FINAL_MARKER,
    StageResult,
    folder_digests,
    marker_digest,
    weights_problem,
)
from core.trl_internals import load_checkpoint_weights
from core.weights import (
    checkpoint_weights,
    fingerprint,
    gather_weights,
    save_whole,
    saved_parameters,
    weights_fingerprint,
)
from curriculum.plan import Stage
from train.stages.base import StageContext, StageKind

log = logging.getLogger(__name__)


def run_stage(kind: StageKind, stage: Stage, ctx: StageContext, rows) -> StageResult:
    """Train one stage of `kind` and publish `stages/<k>-<name>/final`."""
    began = time.time()
    stage_dir = stage_path(ctx.run_dir, stage.dirname)
    trainer = kind.trainer(stage, ctx, rows, stage_dir / "trainer")
    try:
        bind_to_trainer(trainer)
        # the weights it starts from, the same on every rank: under DeepSpeed its checkpoint's (`ExactStart`)
        exact = [c.expected for c in trainer.callback_handler.callbacks if isinstance(c, ExactStart) and c.expected]
        if trainer.is_deepspeed_enabled and not exact:
            raise RuntimeError("a DeepSpeed stage starts from its checkpoint's float32 weights through ExactStart, "
                               "and its trainer has none bound (train/run/runner.py stage_callbacks)")
        start = exact[0] if trainer.is_deepspeed_enabled else fingerprint(trainer.model)
        reference = kind.reference_fingerprint(trainer)
        resumed_from, adopted = resume_and_train(trainer, ctx, stage.name)
        model = merged_lora(trainer.model)  # what the final holds: full weights (LoRA merged in place)
        final = final_weights(trainer, model, adopted, ctx.processes)
        ends = gather(final.fingerprint, ctx.processes)
        if len(set(ends)) > 1:  # data parallelism keeps every rank's copy equal: the ranks trained apart
            raise RuntimeError(f"stage {stage.name}: the ranks end with different weights (fingerprints {ends}); "
                               "no final is published")
        result = StageResult(str(final_checkpoint(stage.dirname)), trainer.state.global_step, start,
                             ctx.reference_model, reference, resumed_from, final_fingerprints=ends,
                             distributed=distributed_record(trainer))
        publish_stage(trainer, model, final.weights, stage_dir,
                      result.marker(stage.name, ctx.config_hash, ctx.task, ctx.init_model),
                      keep_trainer_checkpoints=ctx.keep_trainer_checkpoints, processes=ctx.processes)
    finally:  # however the stage ended: a callback's `on_train_end` never runs when training raises
        for callback in list(trainer.callback_handler.callbacks):
            if callable(getattr(callback, "release", None)):
                callback.release()  # what it holds open for the trainer (a vLLM server's weight-sync group)
    # every rank reads the marker the main process wrote (the final is in place for all of them)
    return dataclasses.replace(result, wall_seconds=round(time.time() - began, 2),
                               final_marker=marker_digest(stage_dir / "final"))


def bind_to_trainer(trainer: Trainer) -> None:
    """Hand the trainer to the callbacks that `bind`; drop TRL's model card (it warns at every offline save)."""
    trainer.create_model_card = lambda *args, **kwargs: None
    for callback in list(trainer.callback_handler.callbacks):
        if callable(getattr(callback, "bind", None)):
            callback.bind(trainer)


def distributed_record(trainer: Trainer) -> dict:
    """How a stage's trainer ran as accelerate set it up (not what a launch file asked for): type, processes, ...

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
    """A final's fingerprint on this rank, and where the module's are not them the whole weights (main process)."""

    fingerprint: str
    weights: dict[str, torch.Tensor] | None = None  # None: save the module as it is (one process, DDP, LoRA merged)


def final_weights(trainer: Trainer, model, adopted: Path | None, processes: Processes) -> FinalWeights:
    """A DeepSpeed checkpoint's master weights (`adopted`), the engine's gathered master copy, or the module."""
    if adopted is not None:
        names = [name for name, _ in model.named_parameters()]
        weights = checkpoint_weights(adopted, names) if processes.is_main else None
        found = weights_fingerprint(weights.items()) if weights is not None else None
        return FinalWeights(broadcast(found, processes), weights)
    if not (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled):
        return FinalWeights(fingerprint(model))
    found, weights = gather_weights(model.named_parameters(), keep=processes.is_main)
    return FinalWeights(found, weights)


def resume_and_train(trainer, ctx: StageContext, stage_name: str) -> tuple[str | None, Path | None]:
    """Train, continuing from `ctx.resume_from`; returns it, and a DeepSpeed checkpoint to publish as it is. One at
    the budget is loaded, not trained on (a step past `max_steps` would shift later steps); a DeepSpeed one is not
    loaded at all (only `train()` builds its engine): its master weights are read from its files."""
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
    """Save the final to `final.tmp`, publish it as `final`, prune trainer checkpoints (`weights`: an engine's)."""
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
    files = folder_digests(tmp_dir, exclude=(FINAL_MARKER,))  # every file of the final but the marker itself
    (tmp_dir / FINAL_MARKER).write_text(json.dumps({**info, "files": files}, indent=2))
    if final_dir.exists():  # an earlier final without a marker, or damaged: never handed off
        shutil.rmtree(final_dir)
    os.replace(tmp_dir, final_dir)


@dataclass(eq=False)
class ExactStart(TrainerCallback):
    """A DeepSpeed stage starts from its checkpoint's exact float32 weights: under bf16 DeepSpeed builds its master
    weights from bf16 copies, which would erase each handoff's updates below bf16's resolution (GRPO's ~1e-6). At
    step 0 the checkpoint's values are written into the master copy and checked; a resume is left alone."""

    init_model: str
    names: list[str] = field(default_factory=list)
    expected: str | None = None  # the checkpoint's fingerprint, once bound to a DeepSpeed trainer

    def bind(self, trainer) -> None:
        if trainer.is_deepspeed_enabled:
            self.names = [name for name, _ in trainer.model.named_parameters()]
            self.expected = weights_fingerprint(saved_parameters(self.init_model, self.names))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.expected is None or state.global_step > 0:
            return
        from deepspeed.utils import safe_set_full_fp32_param

        parameters = dict(model.named_parameters())
        for name, value in saved_parameters(self.init_model, self.names):
            safe_set_full_fp32_param(parameters[name], value)  # every rank: each keeps its own partition of it
        found = fingerprint(model)  # the master weights gathered back
        if found != self.expected:
            raise RuntimeError(f"DeepSpeed's master weights hold {found} after being set from {self.init_model} "
                               f"({self.expected}): the stage would not start from its checkpoint")





@dataclass(eq=False)
class WeightSyncGroup(TrainerCallback):
    """Closes the weight-sync group of a trainer rolling out through a vLLM server (`grpo.vllm_mode=server`): TRL
    1.16 closes its TCP store only at exit, and the next stage's trainer opens it again on the same port. Closed at
    `run_stage`'s teardown: `on_train_end` never runs when training raises or a resume publishes without a step."""

    client: Any = None  # TRL's VLLMClient, once bound to a server-mode trainer on the main process

    def bind(self, trainer) -> None:
        generation = getattr(trainer, "vllm_generation", None)
        if getattr(generation, "mode", None) == "server":
            self.client = getattr(generation, "vllm_client", None)

    def release(self) -> None:
        """Close the group, once."""
        client, self.client = self.client, None
        if client is not None:
            client.close_communicator()


@dataclass(eq=False)
class CheckpointDigests(TrainerCallback):
    """Record a trainer checkpoint's digests once it is saved; all ranks meet first (each writes its RNG state)."""

    processes: Processes = SINGLE

    def on_save(self, args, state, control, **kwargs):
        barrier(self.processes)
        if args.should_save:
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            write_json_atomic(folder / DIGESTS, folder_digests(folder))


def checkpoint_problem(folder: Path, world_size: int = 1) -> str | None:
    """Why a trainer checkpoint of `world_size` processes may not be resumed from, or None."""
    try:
        json.loads((folder / TRAINER_STATE_NAME).read_text())
    except (OSError, ValueError):
        return f"no complete {TRAINER_STATE_NAME} (a kill while the checkpoint was saved)"
    if not (folder / DIGESTS).exists():
        return f"no {DIGESTS} (a kill before the checkpoint's save finished)"
    # torch.save writes a zip archive, whose directory comes last: a cut-off file is no zip
    missing = [rank for rank in range(world_size)
               if world_size > 1 and not zipfile.is_zipfile(folder / f"rng_state_{rank}.pth")]
    if missing:  # a resume without a rank's RNG state would not repeat the run
        return f"no whole RNG state of rank {missing[0]} (rng_state_{missing[0]}.pth)"
    return weights_problem(folder, load_file(folder / DIGESTS))


@dataclass(frozen=True)
class CheckpointScan:
    """The newest checkpoint a resume may take (None: the stage's start), and newer ones passed over, with why."""

    usable: Path | None
    skipped: list[dict] = field(default_factory=list)


def scan_checkpoints(trainer_dir: Path, world_size: int = 1) -> CheckpointScan:
    """A stage's trainer checkpoints, newest first, up to the first complete and intact one."""
    if not trainer_dir.is_dir():
        return CheckpointScan(None)
    steps = [(int(match.group(1)), child) for child in trainer_dir.iterdir()
             if (match := re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", child.name)) and child.is_dir()]
    skipped: list[dict] = []
    for _, child in sorted(steps, reverse=True):
        problem = checkpoint_problem(child, world_size)
        if problem is None:
            return CheckpointScan(child, skipped)
        skipped.append({"checkpoint": child.name, "problem": problem})
    return CheckpointScan(None, skipped)


def checkpoint_step(checkpoint: Path) -> int:
    """The global step a trainer checkpoint was saved at, as transformers names it.

    >>> checkpoint_step(Path("stages/1-a/trainer/checkpoint-12"))
    12
    """
    return int(checkpoint.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-"))
