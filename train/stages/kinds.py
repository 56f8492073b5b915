"""The stage kinds by the name a curriculum's `kind:` gives them, each built with the config it reads.

Each kind carries its facts (core/stage_kinds.py: its step cap, label, whether it learns from rewards),
which the layers below train/ read by the same name; the config schema's `conf.schema.StageKindName`
accepts the same names, so a config is checked without importing the trainers. `tests/test_stage_kinds.py`
holds the three together.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.checks import plain
from curriculum.tasks.base import Task
from train.stages.base import KindSettings, StageKind
from train.stages.grpo import GrpoStage
from train.stages.sft import SftStage

STAGE_KINDS: dict[str, type[StageKind]] = {kind.facts.name: kind for kind in (GrpoStage, SftStage)}


#: The config groups the kinds read: those all of them share, and each kind's own (`grpo`, `sft`).
GROUPS = ("prompt", "model", "reward", *STAGE_KINDS)


def stage_kinds(groups: Mapping, seed: int, task: Task, world_size: int = 1) -> dict[str, StageKind]:
    """Every kind, built from its own config group, the groups all kinds read (`groups`: GROUPS by name),
    the run's seed, the run's task (its rewards) and the number of processes that train each step."""
    plain_groups = {name: plain(groups[name]) for name in GROUPS}
    shared = KindSettings(prompt=plain_groups["prompt"], model=plain_groups["model"], reward=plain_groups["reward"],
                          seed=seed, world_size=world_size, task=task)
    return {name: kind(plain_groups[name], shared) for name, kind in STAGE_KINDS.items()}
