"""The stage kinds by the name a curriculum's `kind:` gives them, each with its trainer (their facts are listed in
core/stage_kinds.py; a kind on one side only fails the import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from core.checks import plain
from core.stage_kinds import STAGE_KIND_FACTS, StageKindFacts
from curriculum.tasks.base import Task
from train.stages.base import KindSettings, StageKind
from train.stages.grpo import GrpoStage
from train.stages.sft import SftStage


def kinds_by_name(implementations: Sequence[type[StageKind]],
                  listed: Mapping[str, StageKindFacts]) -> dict[str, type[StageKind]]:
    """Each kind of `listed` by name with the implementation whose `facts` are its; TypeError for one on one side.

    >>> from core.stage_kinds import GRPO
    >>> kinds_by_name([GrpoStage], {"grpo": GRPO})
    {'grpo': <class 'train.stages.grpo.GrpoStage'>}
    >>> kinds_by_name([GrpoStage], STAGE_KIND_FACTS)
    Traceback (most recent call last):
    TypeError: stage kinds out of step: sft is listed in core/stage_kinds.py with no trainer in train/stages/kinds.py
    """
    by_name = {kind.facts.name: kind for kind in implementations}
    problems = [f"{name} is listed in core/stage_kinds.py with no trainer in train/stages/kinds.py"
                for name in listed if name not in by_name]
    problems += [f"{name}'s trainer ({kind.__name__}) has facts core/stage_kinds.py does not list"
                 for name, kind in by_name.items() if listed.get(name) != kind.facts]
    if problems:
        raise TypeError("stage kinds out of step: " + "; ".join(problems))
    return {name: by_name[name] for name in listed}


STAGE_KINDS: dict[str, type[StageKind]] = kinds_by_name((GrpoStage, SftStage), STAGE_KIND_FACTS)

#: The config groups the kinds read: those all of them share, and each kind's own (`grpo`, `sft`).
GROUPS = ("prompt", "model", "reward", *STAGE_KINDS)


def stage_kinds(groups: Mapping, seed: int, task: Task, world_size: int, names: Iterable[str],
                rewards: tuple[Sequence[Callable], Sequence[float]]) -> dict[str, StageKind]:
    """The kinds `names` (a plan's), each built from its config group in `groups` and the shared `KindSettings`."""
    shared = KindSettings(prompt=plain(groups["prompt"]), model=plain(groups["model"]), reward=plain(groups["reward"]),
                          seed=seed, world_size=world_size, task=task, rewards=rewards)
    return {name: STAGE_KINDS[name](plain(groups[name]), shared) for name in dict.fromkeys(names)}
