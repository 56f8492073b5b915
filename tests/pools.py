"""The pools a composed config draws, for tests that look at them without a run (curriculum.data)."""

from __future__ import annotations

from omegaconf import DictConfig

from curriculum.data import training_pool
from curriculum.plan import Stage
from curriculum.tasks import build_task
from curriculum.tasks.base import Task, TaskRecord
from eval.settings import ValidationSettings, validation_settings


def config_task(cfg: DictConfig) -> Task:
    """The run's task, as the runner builds it."""
    return build_task(cfg.task, fmt=str(cfg.prompt.fmt))


def config_validation(cfg: DictConfig) -> ValidationSettings:
    """What validation reads, as the runner builds it."""
    return validation_settings(cfg.eval, cfg.prompt, cfg.model, config_task(cfg))


def held_out_pools(cfg: DictConfig, *levels) -> dict[str, list[TaskRecord]]:
    """The validation pools of `levels` (K&K: people counts), as a run draws them."""
    task = config_task(cfg)
    keys = [task.level_of(level, "levels") for level in levels]
    return {key: task.validation_records(key, int(cfg.eval.n), int(cfg.eval.seed)) for key in keys}


def stage_pool(cfg: DictConfig, stage: Stage, held_out) -> tuple[list[TaskRecord], int]:
    """A stage's training pool, as a run draws it."""
    return training_pool(config_task(cfg), stage, held_out, seed=int(cfg.seed), spare=int(cfg.eval.n))
