"""Settings that would otherwise be taken without a word: a value the run ignores, a smoke setting kept on a
pretrained model, a promotion rule that can never fire. Checked before any model loads; each refusal is one
line naming its key, each warning one log line."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from core.checks import ConfigError
from curriculum.plan import Stage
from train.rewards.reward_group import low_token_share

log = logging.getLogger(__name__)

# The sources that build their own weights (core/models.py resolve_model); their model configs leave `id` null.
SOURCES_WITHOUT_ID = ("tiny", "smollm2")
# Where experiment=smoke's probe reward lives, as a `reward.custom.<name>._target_` names it.
PROBE_TARGET = f"{low_token_share.__module__}.{low_token_share.__name__}"


def check_model_id(model: Mapping) -> None:
    """Refuse a `model.id` beside a source that never reads it: the run would train that source's model instead.

    The tiny and smollm2 model configs set `id: null`, so any id here is one the user gave.
    """
    source, model_id = str(model.get("source")), model.get("id")
    if source in SOURCES_WITHOUT_ID and model_id is not None:
        raise ConfigError(f"model.id: {model_id} is ignored by model.source={source} (it builds its own weights); "
                          "drop model.id, or load it with model.source=hub (or a hub/local model config such as "
                          "model=qwen2.5-0.5b-instruct)")


def probe_rewards(reward: Mapping) -> list[str]:
    """The names of `reward.custom` entries that are the probe reward (experiment=smoke's `low_tokens`)."""
    custom = reward.get("custom") or {}
    return [str(name) for name, spec in custom.items()
            if isinstance(spec, Mapping) and spec.get("_target_") == PROBE_TARGET]


def smoke_on_pretrained_warning(model: Mapping, reward: Mapping, grpo: Mapping) -> str | None:
    """The one warning line for the probe reward on a model that is not the random-init tiny one, else None.

    Legal (a pipeline check on a real model), but the probe rewards low token ids over the task, and the smoke
    learning rate is sized for a 60k-parameter random-init model.
    """
    probes = probe_rewards(reward)
    if not probes or str(model.get("source")) == "tiny":
        return None
    weights = reward.get("weights") or {}
    named = ", ".join(f"reward.custom.{name} (weight {weights.get(name, 1.0)})" for name in probes)
    return (f"smoke settings on a pretrained model ({model.get('name')}): the probe reward {named} rewards low "
            f"token ids, not the task, and grpo.learning_rate={grpo.get('learning_rate')} is meant for the "
            "random-init tiny model; drop experiment=smoke, or set reward.weights and grpo.learning_rate")


def check_promotions(plan: Sequence[Stage]) -> None:
    """Refuse a stage whose promotion can never be checked within its steps (after `limits`): the check runs at
    a step >= `min_steps` that is a multiple of `every` and below the stage's last step (train/run/stage_end.py)."""
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
