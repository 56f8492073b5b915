"""The config, read once: `read_settings` checks a composed config and returns a `RunSettings`, the typed
record of everything a curriculum run reads. `run_curriculum` and everything under it take this record
(or one of its parts), never the config: what a leaf reads is what it is handed.

Reading order, so that a bad value fails first and names its key: Hydra's schemas (conf/schema.py, while
composing), the task, the plan (curriculum/plan.py), then the rules a type cannot say
(train/config_check.py), all before any model or data loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.fields import as_record
from conf.schema import FinalsConfig, RolloutsConfig
from core.distributed import SINGLE, Processes
from curriculum.plan import Stage, build_plan
from curriculum.tasks import build_task, check_records
from curriculum.tasks.base import Task
from eval.settings import ValidationSettings, subset_levels, validation_settings
from train.config_check import check_config
from train.rewards.reward_group import stack_record
from train.stages.base import StageKind


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
    # `reward` resolved: each component TRL weighs, with its weight and where the weight came from (run.json's
    # `reward_stack`: `train.rewards.reward_group.reward_stack`); None in a run without a stage that learns from them
    reward_stack: list[dict] | None

    @property
    def model_name(self) -> str:
        return str(self.model["name"])


def read_settings(cfg: DictConfig, processes: Processes = SINGLE) -> RunSettings:
    """Check `cfg` (ConfigError naming the first bad key) and return what a run of it reads; `processes` is the
    launch (every step's batch counts them)."""
    task = build_task(cfg.task, fmt=str(cfg.prompt.fmt))
    plan = build_plan(cfg, processes.world_size, task=task)
    kinds, stack = check_config(cfg, plan, processes, task=task)
    check_records(task, plan, subset_levels(task, cfg.eval.subsets), cfg.prompt.fmt, seeds=(cfg.seed, cfg.eval.seed))
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
        reward_stack=stack_record(stack) if any(stage.kind_facts.learns_from_rewards for stage in plan) else None,
    )
