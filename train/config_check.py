"""Config checks that run before any model loads; each error names the key that holds the bad value."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging

import torch
from omegaconf import DictConfig, OmegaConf
from trl import GRPOConfig, SFTConfig

from curriculum.plan import ConfigError, Stage, grpo_batch
from curriculum.prompts import prompt_ids, prompt_text
from eval.config_check import check_data_config, check_eval_config
from eval.grader import FORMATS
from train.rewards import build_reward_funcs

GRPO_FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}
SFT_FIELDS = {f.name for f in dataclasses.fields(SFTConfig)}
# Set by the runner per stage; a config that sets them would be silently overridden.
RUNNER_OWNED = {"output_dir", "max_steps", "report_to", "bf16", "use_cpu", "model_init_kwargs", "reward_weights"}
MODEL_SOURCES = ("hub", "tiny", "smollm2")
REFERENCES = ("previous_stage", "rl_start", "base")
DEVICES = ("auto", "cuda")

log = logging.getLogger(__name__)


def check_config(cfg: DictConfig, plan: list[Stage]) -> None:
    """Raise ConfigError for the first bad value found, naming its key."""
    _check_grpo(OmegaConf.to_container(cfg.grpo, resolve=True), "grpo")
    for stage in plan:
        key = f"curriculum.stages[{stage.index - 1}].overrides"
        if stage.kind == "sft":
            fields = {**OmegaConf.to_container(cfg.sft, resolve=True), **stage.overrides}
            _check_field_names(fields, SFT_FIELDS, key, "SFTConfig")
            _check_no_warmup(fields, key)
        else:
            _check_grpo({**OmegaConf.to_container(cfg.grpo, resolve=True), **stage.overrides}, key)
    check_eval_config(cfg.eval)
    _check_objective(str(cfg.objective), [int(p) for p in cfg.eval.subsets])
    check_data_config(cfg.data)
    if cfg.on_damaged_checkpoint not in ("error", "retrain"):
        raise ConfigError(f"on_damaged_checkpoint: {cfg.on_damaged_checkpoint!r} is not error or retrain")
    if cfg.prompt.fmt not in FORMATS:
        raise ConfigError(f"prompt.fmt: {cfg.prompt.fmt!r} is not one of {sorted(FORMATS)}")
    if cfg.model.source not in MODEL_SOURCES:
        raise ConfigError(f"model.source: {cfg.model.source!r} is not one of {MODEL_SOURCES}")
    if cfg.model.get("lora") and importlib.util.find_spec("peft") is None:
        raise ConfigError("model.lora: LoRA needs the peft extra: pip install -e '.[peft]'")
    _check_reference(cfg, plan)
    _check_device(str(cfg.device), OmegaConf.to_container(cfg.grpo, resolve=True))
    build_reward_funcs(cfg.reward, fmt=cfg.prompt.fmt, max_completion_length=int(cfg.grpo.max_completion_length))


def _check_field_names(fields: dict, known: set[str], key: str, config_name: str) -> None:
    for name in fields:
        if name not in known:
            raise ConfigError(f"{key}.{name}: not a {config_name} field (TRL)")
        if name in RUNNER_OWNED:
            raise ConfigError(f"{key}.{name}: set by the runner per stage; use limits.max_steps or the stage's steps")


def _check_grpo(fields: dict, key: str) -> None:
    _check_field_names(fields, GRPO_FIELDS, key, "GRPOConfig")
    if float(fields.get("beta", 0.0)) < 0:
        raise ConfigError(f"{key}.beta: must be >= 0 (got {fields['beta']})")
    grpo_batch(fields, key)
    _check_no_warmup(fields, key)
    if float(fields.get("learning_rate", 1e-6)) <= 0:
        raise ConfigError(f"{key}.learning_rate: must be > 0 (a stage at learning rate 0 never updates the policy)")
    if int(fields.get("max_completion_length", 512)) <= 0:
        raise ConfigError(f"{key}.max_completion_length: must be > 0")


def _check_no_warmup(fields: dict, key: str) -> None:
    """Every optimizer step must update the policy; transformers' warmup spends the first at learning rate 0."""
    if float(fields.get("warmup_steps") or 0) > 0:
        raise ConfigError(f"{key}.warmup_steps: {fields['warmup_steps']} > 0 makes the stage's first optimizer step "
                          "run at learning rate 0 (transformers' warmup starts from 0); use 0")


def _check_reference(cfg: DictConfig, plan: list[Stage]) -> None:
    """`reference` names a known checkpoint; LoRA can only measure KL to its own starting weights; beta 0 warns."""
    if cfg.reference not in REFERENCES:
        raise ConfigError(f"reference: {cfg.reference!r} is not one of {REFERENCES}")
    if cfg.model.get("lora") and cfg.reference != "previous_stage":
        raise ConfigError(f"reference: {cfg.reference} needs full weights; with model.lora the reference is always "
                          "the stage's starting checkpoint (adapters off), i.e. previous_stage")
    for stage in plan:
        if stage.kind == "grpo" and float(stage.overrides.get("beta", cfg.grpo.beta)) == 0:
            log.warning("stage %s: beta is 0, so TRL loads no reference model and there is no KL term "
                        "(run.json records reference: null); set grpo.beta > 0 to keep one", stage.name)


def _check_device(device: str, grpo: dict) -> None:
    """Refuse a GPU-only setting on a machine without CUDA before anything loads."""
    if device not in DEVICES:
        raise ConfigError(f"device: {device!r} is not one of {DEVICES}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda, but this machine has no CUDA GPU (experiment=single_gpu is for one "
                          "NVIDIA card; on a CPU drop it, or use experiment=smoke / cpu_demo)")
    if grpo.get("use_vllm") and (not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None):
        raise ConfigError("grpo.use_vllm: vLLM rollouts need CUDA and the vllm extra (pip install -e '.[vllm]')")
    if grpo.get("optim") in ("adamw_8bit", "adamw_bnb_8bit") and importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(f"grpo.optim: {grpo['optim']} needs bitsandbytes (pip install bitsandbytes)")


def _check_objective(name: str, subsets: list[int]) -> None:
    allowed = ["mean_final_accuracy", *(f"final_accuracy_{p}ppl" for p in subsets)]
    if name not in allowed:
        raise ConfigError(f"objective: {name!r} is not one of {allowed}")


def check_prompt_lengths(rows_by_name: dict, tokenizer, *, context_length: int, max_new_tokens: int, chat_kwargs=None):
    """Every prompt plus the completion budget must fit the model's context (TRL truncates nothing)."""
    for name, rows in rows_by_name.items():
        longest = max((_prompt_tokens(p, tokenizer, chat_kwargs or {}) for p in rows["prompt"]), default=0)
        if longest + max_new_tokens > context_length:
            raise ConfigError(
                f"model.context_length: {name} has a prompt of {longest} tokens; with "
                f"grpo.max_completion_length {max_new_tokens} it exceeds the context of {context_length}"
            )


def _prompt_tokens(prompt, tokenizer, chat_kwargs: dict) -> int:
    return len(prompt_ids(prompt_text(prompt, tokenizer, chat_kwargs), tokenizer))
