"""The stage kinds by the name a curriculum's `kind:` gives them, each built with the config it reads.

The config schema's `conf.schema.StageKindName` holds the same names, so a config is checked without
importing the trainers; `tests/test_stage_kinds.py` holds the two together.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from curriculum.tasks.base import Task
from train.grpo_stage import GrpoStage
from train.sft_stage import SftStage
from train.stage_run import KindSettings, StageKind

STAGE_KINDS: dict[str, type[StageKind]] = {kind.name: kind for kind in (GrpoStage, SftStage)}


def stage_kinds(cfg: DictConfig, task: Task, world_size: int = 1) -> dict[str, StageKind]:
    """Every kind, built from its own config group (`cfg.<kind name>`), the groups all kinds read, the
    number of processes that train each step and the run's task (its rewards)."""
    def plain(group: str) -> dict:
        return OmegaConf.to_container(cfg[group], resolve=True)

    shared = KindSettings(prompt=plain("prompt"), model=plain("model"), reward=plain("reward"), seed=int(cfg.seed),
                          world_size=world_size, task=task)
    return {name: kind(plain(name), shared) for name, kind in STAGE_KINDS.items()}
