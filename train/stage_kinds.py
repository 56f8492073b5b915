"""Every stage kind by the name a curriculum's `kind:` gives it; the runner and the config checks look stages up here.

The names are `curriculum.plan.STAGE_KINDS` (the plan checks them without importing the trainers).
"""

from __future__ import annotations

from train.grpo_stage import GRPO
from train.sft_stage import SFT
from train.stage_run import StageKind

STAGE_KINDS: dict[str, StageKind] = {kind.name: kind for kind in (GRPO, SFT)}
