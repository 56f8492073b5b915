"""The GRPO stage kind: TRL's GRPOTrainer from the previous stage's saved checkpoint to this stage's final.

TRL builds the reference model from the policy's `config._name_or_path`, so each stage starts from
the saved directory of the previous one (never an in-memory model): with `reference:
previous_stage` the reference then holds the previous stage's weights. For `rl_start` or `base`
the policy is loaded here and pointed at that checkpoint, so TRL builds the reference from it.
With `beta: 0` TRL loads no reference at all. With LoRA the reference is the policy with its
adapters off, i.e. the stage's starting (merged) weights: only `previous_stage` is possible.
What every kind shares (train, resume, publish) is `train/stage_run.py`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from accelerate.utils import is_peft_model
from omegaconf import DictConfig, OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from core.checks import ConfigError
from core.models import lora_config
from curriculum.data import to_rows
from curriculum.plan import Stage, grpo_batch
from train.adaptive import with_distinct_share
from train.rewards import build_reward_funcs
from train.stage_run import StageContext, check_trainer_fields, fingerprint, token_counts, trainer_fields

log = logging.getLogger(__name__)


def grpo_config(cfg: DictConfig, stage: Stage, output_dir: Path) -> GRPOConfig:
    """GRPOConfig from `cfg.grpo`, the stage's overrides and the device (bf16/optim on CUDA only)."""
    fields = trainer_fields(OmegaConf.to_container(cfg.grpo, resolve=True), stage, seed=int(cfg.seed),
                            output_dir=output_dir, lora=cfg.model.get("lora"))
    return GRPOConfig(**fields, remove_unused_columns=False)


def check_grpo_fields(fields: Mapping, key: str) -> None:
    """GRPOConfig fields (the `grpo` group, or it with a stage's overrides) that TRL would accept and that train."""
    check_trainer_fields(fields, GRPOConfig, key)  # names and plain types, against TRL's dataclass
    if fields.get("beta", 0.0) < 0:
        raise ConfigError(f"{key}.beta: must be >= 0 (got {fields['beta']})")
    grpo_batch(fields, key)
    if fields.get("learning_rate", 1e-6) <= 0:
        raise ConfigError(f"{key}.learning_rate: must be > 0 (a stage at learning rate 0 never updates the policy)")
    if fields.get("max_completion_length") is not None and fields["max_completion_length"] <= 0:
        raise ConfigError(f"{key}.max_completion_length: must be > 0")


class GrpoStage:
    """`kind: grpo` (the default): rewards from the grader, KL to a reference checkpoint unless beta is 0."""

    name = "grpo"
    learns_from_rewards = True
    rows = staticmethod(to_rows)

    def check(self, cfg: DictConfig, stage: Stage, key: str) -> None:
        check_grpo_fields({**OmegaConf.to_container(cfg.grpo, resolve=True), **stage.overrides}, key)
        if not self.has_reference(cfg, stage):
            log.warning("stage %s: beta is 0, so TRL loads no reference model and there is no KL term "
                        "(run.json records reference: null); set grpo.beta > 0 to keep one", stage.name)

    def check_lengths(self, cfg: DictConfig, stage: Stage, rows, tokenizer) -> None:
        """Every prompt plus the completion budget must fit the model's context (TRL truncates nothing)."""
        context_length = int(cfg.model.context_length)
        max_new_tokens = int(stage.overrides.get("max_completion_length", cfg.grpo.max_completion_length))
        longest = max(token_counts(rows["prompt"], tokenizer), default=0)
        if longest + max_new_tokens > context_length:
            raise ConfigError(
                f"model.context_length: {stage.name} has a prompt of {longest} tokens; with "
                f"grpo.max_completion_length {max_new_tokens} it exceeds the context of {context_length}"
            )

    def has_reference(self, cfg: DictConfig, stage: Stage) -> bool:
        return float(stage.overrides.get("beta", cfg.grpo.beta)) > 0

    def trainer(self, stage: Stage, ctx: StageContext, rows, output_dir: Path, callbacks: list) -> GRPOTrainer:
        cfg = ctx.cfg
        args = grpo_config(cfg, stage, output_dir)
        funcs, weights = build_reward_funcs(cfg.reward, fmt=cfg.prompt.fmt,
                                            max_completion_length=args.max_completion_length)
        args.reward_weights = weights
        funcs = with_distinct_share(funcs, args.num_generations)  # the collapse guard's distinct-share metric
        return GRPOTrainer(
            model=_policy(ctx, args.model_init_kwargs["dtype"]),
            reward_funcs=funcs,
            args=args,
            train_dataset=rows,
            processing_class=AutoTokenizer.from_pretrained(ctx.init_model, padding_side="left"),
            callbacks=callbacks,
            peft_config=lora_config(cfg.model),
        )

    def reference_fingerprint(self, trainer: GRPOTrainer) -> str | None:
        """TRL's reference model, or (LoRA) the policy with adapters off."""
        if getattr(trainer, "ref_model", None) is not None:
            return fingerprint(trainer.ref_model)
        if trainer.beta != 0 and is_peft_model(trainer.model):
            return fingerprint(trainer.model)  # a PEFT model's fingerprint is of its adapter-free weights
        return None


def _policy(ctx: StageContext, dtype_name: str):
    """The policy as TRL should load it: a path (reference = same checkpoint) or a model pointed at the reference."""
    if ctx.reference_model in (None, ctx.init_model):
        return ctx.init_model
    model = AutoModelForCausalLM.from_pretrained(ctx.init_model, dtype=dtype_name)
    model.config._name_or_path = ctx.reference_model  # TRL builds the reference from this path
    return model


GRPO = GrpoStage()
