"""Config checks that run before any model loads; each error names the key that holds the bad value."""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, OmegaConf
from trl import GRPOConfig, SFTConfig

from curriculum.plan import ConfigError, Stage
from eval.config_check import check_data_config, check_eval_config
from eval.generation import prompt_text
from eval.grader import FORMATS
from train.rewards import build_reward_funcs

GRPO_FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}
SFT_FIELDS = {f.name for f in dataclasses.fields(SFTConfig)}
# Set by the runner per stage; a config that sets them would be silently overridden.
RUNNER_OWNED = {"output_dir", "max_steps", "report_to", "bf16", "use_cpu", "model_init_kwargs", "reward_weights"}
MODEL_SOURCES = ("hub", "tiny", "smollm2")


def check_config(cfg: DictConfig, plan: list[Stage]) -> None:
    """Raise ConfigError for the first bad value found, naming its key."""
    _check_grpo(OmegaConf.to_container(cfg.grpo, resolve=True), "grpo")
    for stage in plan:
        key = f"curriculum.stages[{stage.index - 1}].overrides"
        if stage.kind == "sft":
            fields = {**OmegaConf.to_container(cfg.sft, resolve=True), **stage.overrides}
            _check_field_names(fields, SFT_FIELDS, key, "SFTConfig")
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
    if cfg.model.get("lora") and not cfg.ref_refresh:
        raise ConfigError("ref_refresh: false needs full weights; with model.lora the reference is always the "
                          "stage's starting checkpoint (adapters off)")
    build_reward_funcs(cfg.reward, fmt=cfg.prompt.fmt, max_completion_length=int(cfg.grpo.max_completion_length))


def _check_field_names(fields: dict, known: set[str], key: str, config_name: str) -> None:
    for name in fields:
        if name not in known:
            raise ConfigError(f"{key}.{name}: not a {config_name} field (TRL)")
        if name in RUNNER_OWNED:
            raise ConfigError(f"{key}.{name}: set by the runner per stage; use limits.max_steps or the stage's steps")


def _check_grpo(fields: dict, key: str) -> None:
    _check_field_names(fields, GRPO_FIELDS, key, "GRPOConfig")
    if float(fields.get("beta", 0.0)) <= 0:
        raise ConfigError(f"{key}.beta: must be > 0 (with beta=0 TRL loads no reference model to refresh)")
    generations = int(fields.get("num_generations", 8))
    if generations < 2:
        raise ConfigError(f"{key}.num_generations: must be >= 2 (GRPO normalises within a group)")
    batch = int(fields.get("per_device_train_batch_size", 8)) * int(fields.get("gradient_accumulation_steps", 1))
    generation_batch = int(fields.get("generation_batch_size") or batch)
    if generation_batch % generations:
        raise ConfigError(
            f"{key}.num_generations: {generations} does not divide the generation batch {generation_batch} "
            "(per_device_train_batch_size x gradient_accumulation_steps, or generation_batch_size)"
        )
    if int(fields.get("max_completion_length", 512)) <= 0:
        raise ConfigError(f"{key}.max_completion_length: must be > 0")


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
    text = prompt_text(prompt, tokenizer, dict(chat_kwargs))
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])
