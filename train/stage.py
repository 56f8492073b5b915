"""One GRPO stage: TRL's GRPOTrainer from the previous stage's saved checkpoint to this stage's final.

TRL builds the reference model from the policy's `config._name_or_path`, so each stage starts from
the saved directory of the previous one (never an in-memory model): with `reference:
previous_stage` the reference then holds the previous stage's weights. For `rl_start` or `base`
the policy is loaded here and pointed at that checkpoint, so TRL builds the reference from it.
With `beta: 0` TRL loads no reference at all. With LoRA the reference is the policy with its
adapters off, i.e. the stage's starting (merged) weights: only `previous_stage` is possible.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from accelerate.utils import is_peft_model
from omegaconf import DictConfig, OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerState
from transformers.trainer import TRAINER_STATE_NAME
from trl import GRPOConfig, GRPOTrainer

from core.models import LORA_LEARNING_RATE, device_settings, lora_config, merge_lora_and_save
from core.rundir import JsonlWriter
from curriculum.plan import Stage
from train.checkpoints import fingerprint, last_complete_checkpoint, publish_final
from train.guard import with_distinct_share
from train.manifest import config_hash
from train.rewards import build_reward_funcs
from train.tracking import MetricsCallback

log = logging.getLogger(__name__)


@dataclass
class StageContext:
    """What a stage needs from the run around it."""

    cfg: DictConfig
    run_dir: Path
    base_model: str  # the base checkpoint (stage 1's policy)
    init_model: str  # the checkpoint this stage starts from
    reference_model: str | None  # the checkpoint TRL's reference holds (None: beta 0, no reference)
    step_offset: int  # global steps done before this stage
    metrics: JsonlWriter
    tracker: object
    callbacks: list = field(default_factory=list)  # extra TrainerCallbacks (validation every N steps)


def grpo_config(cfg: DictConfig, stage: Stage, output_dir: Path) -> GRPOConfig:
    """GRPOConfig from `cfg.grpo`, the stage's overrides and the device (bf16/optim on CUDA only)."""
    device = device_settings()
    fields = {"optim": device["optim"], **OmegaConf.to_container(cfg.grpo, resolve=True)}
    if cfg.model.get("lora"):  # adapters train at their own, larger rate (TRL's PEFT docs: ~1e-5 for GRPO)
        fields["learning_rate"] = float(cfg.model.lora.get("learning_rate") or LORA_LEARNING_RATE)
    fields.update(stage.overrides)
    fields.update(
        output_dir=str(output_dir),
        max_steps=stage.steps,
        seed=int(cfg.seed) + stage.index,
        report_to="none",
        bf16=device["bf16"],
        use_cpu=device["use_cpu"],
        model_init_kwargs={"dtype": str(device["dtype"]).removeprefix("torch.")},
        save_strategy="steps",
        remove_unused_columns=False,
    )
    return GRPOConfig(**fields)


def _policy(ctx: StageContext, dtype_name: str):
    """The policy as TRL should load it: a path (reference = same checkpoint) or a model pointed at the reference."""
    if ctx.reference_model in (None, ctx.init_model):
        return ctx.init_model
    model = AutoModelForCausalLM.from_pretrained(ctx.init_model, dtype=dtype_name)
    model.config._name_or_path = ctx.reference_model  # TRL builds the reference from this path
    return model


def run_grpo_stage(stage: Stage, ctx: StageContext, train_rows) -> dict:
    """Train one stage and publish `stages/<k>-<name>/final`; returns what run.json records."""
    cfg, stage_dir = ctx.cfg, ctx.run_dir / "stages" / stage.dirname
    args = grpo_config(cfg, stage, stage_dir / "trainer")
    funcs, weights = build_reward_funcs(cfg.reward, fmt=cfg.prompt.fmt,
                                        max_completion_length=args.max_completion_length)
    args.reward_weights = weights
    funcs = with_distinct_share(funcs, args.num_generations)  # the collapse guard's distinct-share metric
    tokenizer = AutoTokenizer.from_pretrained(ctx.init_model, padding_side="left")
    metrics = MetricsCallback(
        ctx.metrics, ctx.tracker, stage_index=stage.index, stage_name=stage.name,
        ppl=stage.ppl_label, step_offset=ctx.step_offset,
    )
    trainer = GRPOTrainer(
        model=_policy(ctx, args.model_init_kwargs["dtype"]),
        reward_funcs=funcs,
        args=args,
        train_dataset=train_rows,
        processing_class=tokenizer,
        callbacks=[metrics, *ctx.callbacks],
        peft_config=lora_config(cfg.model),
    )
    # Before training: a resume loads its checkpoint into the policy, and the stage started from init_model.
    start = fingerprint(trainer.model)
    reference = _reference_fingerprint(trainer)
    resumed_from = resume_and_train(trainer, stage_dir, stage.name)
    info = {
        "stage": stage.name, "config_hash": config_hash(cfg), "steps_done": trainer.state.global_step,
        "init": ctx.init_model,
        "policy_fingerprint": start, "reference_fingerprint": reference,
    }
    publish_stage(trainer.model, tokenizer, stage_dir, info, keep_trainer_checkpoints=cfg.keep_trainer_checkpoints)
    return {
        **info,
        "reference": ctx.reference_model,
        "resumed_from": resumed_from,
    }


def _reference_fingerprint(trainer) -> str | None:
    """The weights KL is measured against: TRL's reference model, or (LoRA) the policy with adapters off."""
    if getattr(trainer, "ref_model", None) is not None:
        return fingerprint(trainer.ref_model)
    if trainer.beta != 0 and is_peft_model(trainer.model):
        return fingerprint(trainer.model)  # a PEFT model's fingerprint is of its adapter-free weights
    return None


def resume_and_train(trainer, stage_dir: Path, stage_name: str) -> str | None:
    """Train, continuing from the stage's last complete trainer checkpoint if a killed run left one.

    A checkpoint already at the budget (a kill while the final was written) is loaded, not trained
    on: training it again would run a step past `max_steps` and shift every later global step.
    """
    resume_from = last_complete_checkpoint(stage_dir / "trainer")
    if resume_from is None:
        trainer.train()
        return None
    state = TrainerState.load_from_json(str(resume_from / TRAINER_STATE_NAME))
    if state.global_step >= trainer.args.max_steps:
        log.info("stage %s: %s is at the budget; publishing it without training", stage_name, resume_from)
        trainer._load_from_checkpoint(str(resume_from))
        trainer.state = state
    else:
        log.info("stage %s: resuming from %s", stage_name, resume_from)
        trainer.train(resume_from_checkpoint=str(resume_from))
    return str(resume_from)


def publish_stage(model, tokenizer, stage_dir: Path, info: dict, *, keep_trainer_checkpoints: bool) -> None:
    """Save full weights (LoRA merged) to `final.tmp`, publish it as `final`, prune trainer checkpoints."""
    tmp = stage_dir / "final.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    merge_lora_and_save(model, tokenizer, tmp)
    publish_final(tmp, stage_dir / "final", info)
    if not keep_trainer_checkpoints:
        shutil.rmtree(stage_dir / "trainer", ignore_errors=True)
