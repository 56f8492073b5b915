"""The GRPO stage kind: TRL's GRPOTrainer from the previous stage's saved checkpoint to this stage's final. TRL
builds the reference from the checkpoint the policy's config names (for `rl_start` or `base` pointed there:
`point_reference_at`); colocated rollouts go through the process's one vLLM engine (`colocated_engine_setup`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from accelerate.utils import is_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from core.checks import ConfigError
from core.stage_kinds import GRPO, StageKindFacts
from core.trl_internals import point_reference_at, trl_engine_names
from core.weights import fingerprint
from curriculum.data import to_rows
from curriculum.plan import Stage, grpo_batch
from curriculum.prompts import prompt_ids
from curriculum.tasks.base import TaskRecord
from eval.vllm_engine import ProcessEngine, process_kept, rollout_arguments
from train.rewards.checks import checked_rewards
from train.rewards.reward_group import task_reward_funcs
from train.stages.base import KindSettings, StageContext
from train.stages.fields import check_trainer_fields, lora_config, trainer_fields

log = logging.getLogger(__name__)


def grpo_config(grpo: Mapping, stage: Stage, output_dir: Path, *, seed: int, lora: Mapping | None) -> GRPOConfig:
    """GRPOConfig from the `grpo` group, the stage's overrides and the device (bf16/optim on CUDA only)."""
    fields = trainer_fields(grpo, stage, seed=seed, output_dir=output_dir, lora=lora, config_class=GRPOConfig)
    return GRPOConfig(**fields, remove_unused_columns=False)


def check_grpo_fields(fields: Mapping, key: str, world_size: int = 1) -> None:
    """GRPOConfig fields (the `grpo` group, or it with a stage's overrides) that TRL accepts and that train."""
    check_trainer_fields(fields, GRPOConfig, key)  # names and plain types, against TRL's dataclass
    if fields.get("beta", 0.0) < 0:
        raise ConfigError(f"{key}.beta: must be >= 0 (got {fields['beta']})")
    grpo_batch(fields, key, world_size)
    if fields.get("learning_rate", 1e-6) <= 0:
        raise ConfigError(f"{key}.learning_rate: must be > 0 (a stage at learning rate 0 never updates the policy)")
    if fields.get("max_completion_length") is not None and fields["max_completion_length"] <= 0:
        raise ConfigError(f"{key}.max_completion_length: must be > 0")


@dataclass(eq=False)
class GrpoStage:
    """`kind: grpo` (the default): the task's rewards, KL to a reference checkpoint unless beta is 0."""

    facts: ClassVar[StageKindFacts] = GRPO
    grpo: Mapping
    shared: KindSettings

    def rows(self, records: list[TaskRecord], tokenizer):
        model = self.shared.model
        return to_rows(self.shared.task, records, self.shared.prompt, tokenizer, chat=bool(model["chat"]),
                       chat_kwargs=model.get("chat_template_kwargs"))

    def check(self, stage: Stage, key: str) -> None:
        if stage.overrides:  # else the stage trains on the group as it is, which check_config checks as `grpo`
            check_grpo_fields({**self.grpo, **stage.overrides}, key, self.shared.world_size)
        run_wide = sorted(name for name in stage.overrides if name == "use_vllm" or name.startswith("vllm_"))
        if run_wide:  # the run starts (or keeps unloaded) vLLM from the grpo group: core.models.defer_vllm
            raise ConfigError(f"{key}.{run_wide[0]}: vLLM rollouts are set for the whole run, in grpo.{run_wide[0]}")
        if not self.has_reference(stage):
            log.warning("stage %s: beta is 0, so TRL loads no reference model and there is no KL term "
                        "(run.json records reference: null); set grpo.beta > 0 to keep one", stage.name)

    def check_lengths(self, stage: Stage, rows, tokenizer) -> None:
        """Every prompt plus the completion budget must fit the model's context (TRL truncates nothing)."""
        context_length = int(self.shared.model["context_length"])
        max_new_tokens = int(stage.overrides.get("max_completion_length", self.grpo["max_completion_length"]))
        longest = max((len(prompt_ids(prompt, tokenizer)) for prompt in rows["prompt"]), default=0)  # as TRL tokenizes
        if longest + max_new_tokens > context_length:
            raise ConfigError(
                f"model.context_length: {stage.name} has a prompt of {longest} tokens; with "
                f"grpo.max_completion_length {max_new_tokens} it exceeds the context of {context_length}"
            )

    def has_reference(self, stage: Stage) -> bool:
        return float(stage.overrides.get("beta", self.grpo["beta"])) > 0

    def rollout_engine(self, stage: Stage, rank: int) -> dict | None:
        args = grpo_config(self.grpo, stage, Path("unused"), seed=self.shared.seed, lora=self.shared.model.get("lora"))
        return rollout_arguments(vars(args), rank) if colocated(args) else None

    def trainer(self, stage: Stage, ctx: StageContext, rows, output_dir: Path) -> GRPOTrainer:
        lora = self.shared.model.get("lora")
        args = grpo_config(self.grpo, stage, output_dir, seed=self.shared.seed, lora=lora)
        funcs, weights = self.shared.rewards
        if args.max_completion_length != self.grpo["max_completion_length"]:  # the rewards read the length
            funcs, weights = task_reward_funcs(self.shared.reward, self.shared.task, fmt=self.shared.prompt["fmt"],
                                               max_completion_length=args.max_completion_length)
        args.reward_weights = list(weights)
        funcs = checked_rewards(funcs, timeout_s=self.shared.reward.get("timeout_s"),
                                warn=ctx.reward_warning,  # one finite number (or None) per completion, in time
                                group_size=args.num_generations)  # the collapse guard's distinct-share metric
        policy = ctx.init_model  # a path: TRL's reference is the same checkpoint
        if ctx.reference_model not in (None, ctx.init_model):  # else the policy is pointed at the reference
            policy = AutoModelForCausalLM.from_pretrained(ctx.init_model, dtype=args.model_init_kwargs["dtype"])
            point_reference_at(policy, ctx.reference_model)
        with colocated_engine_setup(ctx.engine) if colocated(args) else nullcontext():
            trainer = GRPOTrainer(
                model=policy,
                reward_funcs=funcs,
                args=args,
                train_dataset=rows,
                processing_class=AutoTokenizer.from_pretrained(ctx.init_model, padding_side="left"),
                callbacks=ctx.callbacks,
                peft_config=lora_config(self.shared.model),
            )
        if colocated(args) and trainer.vllm_generation.llm is not ctx.engine.llm:  # never a second engine, silently
            raise RuntimeError("TRL started a vLLM engine of its own beside the process's one (CUDA's allocator "
                               "refuses a second): core/trl_internals.py trl_engine_names no longer finds TRL's LLM")
        return trainer

    def reference_fingerprint(self, trainer: GRPOTrainer) -> str | None:
        """TRL's reference model, or (LoRA) the policy with adapters off."""
        if getattr(trainer, "ref_model", None) is not None:  # under DeepSpeed, the module inside its engine
            return fingerprint(trainer.accelerator.unwrap_model(trainer.ref_model))
        if trainer.beta != 0 and is_peft_model(trainer.model):
            return fingerprint(trainer.model)  # a PEFT model's fingerprint is of its adapter-free weights
        return None


@contextmanager
def colocated_engine_setup(engine: ProcessEngine) -> Iterator[None]:
    """Around building a colocated GRPOTrainer: TRL gets the process's engine where it would start its own, and
    os.environ is put back (TRL's RANK, WORLD_SIZE... would make the next trainer wrap the policy in DDP)."""
    names = trl_engine_names()
    started = names.get("LLM")
    names["LLM"] = engine.for_trainer
    try:
        with process_kept(rng=False):
            yield
    finally:
        names["LLM"] = started


def colocated(args) -> bool:
    """Whether a trainer with these arguments rolls out through its own vLLM engine (TRL's colocate mode)."""
    return bool(getattr(args, "use_vllm", False)) and getattr(args, "vllm_mode", None) == "colocate"
