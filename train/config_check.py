"""Config checks that run before any model loads; each error names the key that holds the bad value."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from trl import GRPOConfig, SFTConfig

from curriculum.plan import KNOWN_PPL, ConfigError, Stage
from eval.generation import prompt_text
from eval.grader import FORMATS
from eval.vllm_backend import vllm_available
from train.rewards import build_reward_funcs

GRPO_FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}
SFT_FIELDS = {f.name for f in dataclasses.fields(SFTConfig)}
# Set by the runner per stage; a config that sets them would be silently overridden.
RUNNER_OWNED = {"output_dir", "max_steps", "report_to", "bf16", "use_cpu", "model_init_kwargs", "reward_weights"}
DATA_SOURCES = ("generated", "hub", "local")
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
    _check_eval(cfg.eval)
    _check_objective(str(cfg.objective), [int(p) for p in cfg.eval.subsets])
    _check_data(cfg.data)
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


def _check_eval(eval_cfg: DictConfig) -> None:
    subsets = list(eval_cfg.subsets)
    if not subsets:
        raise ConfigError("eval.subsets: must list at least one ppl")
    for ppl in subsets:
        if ppl not in KNOWN_PPL:
            raise ConfigError(f"eval.subsets: unknown ppl {ppl}; puzzles exist for 2..8")
    if int(eval_cfg.every) < 0:
        raise ConfigError(f"eval.every: must be >= 0 steps (0 = only after each stage; got {eval_cfg.every})")
    for name in ("n", "samples", "batch_size", "max_new_tokens"):
        if int(eval_cfg[name]) <= 0:
            raise ConfigError(f"eval.{name}: must be > 0 (got {eval_cfg[name]})")
    if eval_cfg.backend not in ("hf", "vllm"):
        raise ConfigError(f"eval.backend: {eval_cfg.backend!r} is not hf or vllm")
    if eval_cfg.backend == "vllm" and not vllm_available():
        raise ConfigError("eval.backend: vllm needs CUDA and the vllm extra (pip install -e '.[vllm]'); "
                          "use eval.backend=hf")
    if float(eval_cfg.temperature) < 0:
        raise ConfigError("eval.temperature: must be >= 0 (0 = greedy)")
    if eval_cfg.temperature == 0 and int(eval_cfg.samples) > 1:
        raise ConfigError("eval.samples: > 1 needs eval.temperature > 0 (greedy samples are all the same)")


def _check_objective(name: str, subsets: list[int]) -> None:
    allowed = ["mean_final_accuracy", *(f"final_accuracy_{p}ppl" for p in subsets)]
    if name not in allowed:
        raise ConfigError(f"objective: {name!r} is not one of {allowed}")


def _check_data(data_cfg: DictConfig) -> None:
    if data_cfg.source not in DATA_SOURCES:
        raise ConfigError(f"data.source: {data_cfg.source!r} is not one of {DATA_SOURCES}")
    if data_cfg.source == "local" and (data_cfg.path is None or not Path(str(data_cfg.path)).is_dir()):
        raise ConfigError(f"data.path: {data_cfg.path!r} is not a folder (needed by data.source=local)")


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
