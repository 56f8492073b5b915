"""The stage plan and the config checks: every bad value fails before any model loads, naming its key."""

from __future__ import annotations

import pytest

from curriculum.plan import ConfigError, build_plan, prompts_per_step
from train.config_check import check_config


def test_kk_ladder_plan(make_cfg):
    plan = build_plan(make_cfg("+curriculum=kk_ladder"))
    assert [s.name for s in plan] == ["2ppl", "3ppl", "4ppl", "5ppl", "6ppl"]
    assert [s.steps for s in plan] == [10, 20, 10, 10, 200]
    assert [list(s.ppl_weights) for s in plan] == [[2], [3], [4], [5], [6]]
    assert plan[-1].dirname == "5-6ppl"


def test_kk_mixed_matches_ladder_total_steps(make_cfg):
    ladder = build_plan(make_cfg("+curriculum=kk_ladder"))
    (mixed,) = build_plan(make_cfg("+curriculum=kk_mixed"))
    assert mixed.steps == sum(s.steps for s in ladder)
    assert mixed.ppl_weights == {p: 0.2 for p in (2, 3, 4, 5, 6)}


def test_kk_logicrl_is_one_pass_over_900(make_cfg):
    cfg = make_cfg("+curriculum=kk_logicrl")
    plan = build_plan(cfg)
    assert [s.name for s in plan] == ["3ppl", "4ppl", "5ppl", "6ppl", "7ppl"]
    # 900 puzzles at 2 prompts per optimizer step (8 x 2 completions / 8 generations) = 450 steps
    assert prompts_per_step(cfg) == 2
    assert {s.steps for s in plan} == {450}


def test_smoke_caps_every_stage(make_cfg):
    plan = build_plan(make_cfg("+curriculum=kk_ladder", "experiment=smoke"))
    assert {s.steps for s in plan} == {2}
    assert {s.pool for s in plan} == {16}


BAD_CONFIGS = [
    # no curriculum selected at all
    ((), "curriculum"),
    # 9 people: no puzzles of that size exist in the grammar or the published data
    (("+curriculum=kk_ladder", "curriculum.stages.0.ppl=9"), "curriculum.stages[0].ppl"),
    # a step budget of zero trains nothing
    (("+curriculum=kk_ladder", "curriculum.stages.1.steps=0"), "curriculum.stages[1].steps"),
    # a negative budget
    (("+curriculum=kk_ladder", "curriculum.stages.1.steps=-3"), "curriculum.stages[1].steps"),
    # a misspelt stage key would otherwise be ignored
    (("+curriculum=kk_ladder", "+curriculum.stages.0.stpes=3"), "curriculum.stages[0].stpes"),
    # 3 generations cannot divide a generation batch of 16 completions
    (("+curriculum=kk_ladder", "grpo.num_generations=3"), "grpo.num_generations"),
    # the same, set only in one stage's overrides
    (("+curriculum=kk_ladder", "+curriculum.stages.2.overrides.num_generations=5"),
     "curriculum.stages[2].overrides.num_generations"),
    # an SFT stage takes SFTConfig fields: a GRPO-only field there is a mistake
    (("+curriculum=kk_r1", "+curriculum.stages.0.overrides.num_generations=4"),
     "curriculum.stages[0].overrides.num_generations"),
    # beta 0: TRL would load no reference model, so there is nothing to refresh
    (("+curriculum=kk_ladder", "grpo.beta=0"), "grpo.beta"),
    # a GRPOConfig field that does not exist (TRL 1.x removed max_prompt_length)
    (("+curriculum=kk_ladder", "+grpo.max_prompt_length=512"), "grpo.max_prompt_length"),
    # the runner sets max_steps from the stage budget
    (("+curriculum=kk_ladder", "+grpo.max_steps=5"), "grpo.max_steps"),
    # validation on 1 person is not a puzzle
    (("+curriculum=kk_ladder", "eval.subsets=[1,2]"), "eval.subsets"),
    (("+curriculum=kk_ladder", "eval.n=0"), "eval.n"),
    # sampled validation needs a temperature
    (("+curriculum=kk_ladder", "eval.samples=4"), "eval.samples"),
    (("+curriculum=kk_ladder", "data.source=web"), "data.source"),
    # no CUDA and no vllm here: the vLLM backend is refused before anything loads
    (("+curriculum=kk_ladder", "eval.backend=vllm"), "eval.backend"),
    (("+curriculum=kk_ladder", "data=local", "data.path=/nonexistent"), "data.path"),
    (("+curriculum=kk_ladder", "prompt.fmt=xml"), "prompt.fmt"),
    (("+curriculum=kk_ladder", "model.source=s3"), "model.source"),
    # the sweep objective must be something validation measures
    (("+curriculum=kk_ladder", "objective=final_accuracy_9ppl"), "objective"),
    # reward weights are checked too (a typo in a sweep key)
    (("+curriculum=kk_ladder", "+reward.weights.fromat=1"), "reward.weights.fromat"),
]


@pytest.mark.parametrize(("overrides", "key"), BAD_CONFIGS, ids=[k for _, k in BAD_CONFIGS])
def test_bad_config_names_the_key(make_cfg, overrides, key):
    cfg = make_cfg(*overrides)
    with pytest.raises((ConfigError, ValueError)) as err:
        check_config(cfg, build_plan(cfg))
    assert str(err.value).startswith(key), str(err.value)


def test_good_configs_pass(make_cfg):
    for curriculum in ("kk_ladder", "kk_logicrl", "kk_mixed"):
        cfg = make_cfg(f"+curriculum={curriculum}")
        check_config(cfg, build_plan(cfg))
