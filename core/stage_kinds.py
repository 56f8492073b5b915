"""The stage kinds, the one list of them (`STAGE_KIND_FACTS`): the facts the plan, console and report need of a kind
without importing the trainers (train/stages/kinds.py refuses at import a kind on one side only).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageKindFacts:
    """One kind of stage (`kind:` in a curriculum)."""

    name: str  # `kind:` in a curriculum, run.json's `kind`, and the config group of its trainer's fields
    label: str  # how the console and the report name it
    learns_from_rewards: bool  # generates completions the task's rewards score: reinforcement learning starts
    # at the first such stage, and only such a stage has a KL reference, promotion, the collapse guard, rollouts
    supervised: bool  # trains on the task's reference responses (`Task.supervised`)
    step_cap: str  # the `limits` key that caps its steps
    curve: str  # the metrics.jsonl key its training curve follows
    default: bool  # the kind of a stage without `kind:`; the console and the plots name every other kind
    trainer_config: str  # TRL's config class (`trl.<name>`), whose fields its config group holds
    # the tracker's prefix of its log keys: GRPO's as TRL's (`train/reward`), SFT's apart: never one loss panel
    tracker_prefix: str


GRPO = StageKindFacts("grpo", "GRPO", learns_from_rewards=True, supervised=False, step_cap="max_steps",
                      curve="reward", default=True,
                      trainer_config="GRPOConfig", tracker_prefix="train")
SFT = StageKindFacts("sft", "SFT", learns_from_rewards=False, supervised=True, step_cap="max_sft_steps",
                     curve="loss", default=False,
                     trainer_config="SFTConfig", tracker_prefix="sft")
STAGE_KIND_FACTS: dict[str, StageKindFacts] = {facts.name: facts for facts in (GRPO, SFT)}
# the kind of a stage without `kind:`: exactly one (unpacking fails at import otherwise)
(DEFAULT_KIND,) = (facts for facts in STAGE_KIND_FACTS.values() if facts.default)


def recorded_kind(name: str | None) -> StageKindFacts:
    """The facts of a stage kind as run.json records it; none, or an unknown one, reads as the default kind.

    >>> recorded_kind("sft").label, recorded_kind(None).label, recorded_kind("ppo").label
    ('SFT', 'GRPO', 'GRPO')
    """
    return STAGE_KIND_FACTS.get(name, DEFAULT_KIND) if isinstance(name, str) else DEFAULT_KIND
