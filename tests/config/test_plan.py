"""The stage plan and the config checks: every bad value fails before any model loads, naming its key."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conf.schema import StageConfig
from core.checks import ConfigError
from curriculum.plan import build_plan, prompts_per_step
from train.settings import check_config


def test_kk_ladder_plan(make_cfg):
    plan = build_plan(make_cfg("+curriculum=kk_ladder"))
    assert [s.name for s in plan] == ["2ppl", "3ppl", "4ppl", "5ppl", "6ppl"]
    assert [s.steps for s in plan] == [10, 20, 10, 10, 200]
    assert [list(s.level_weights) for s in plan] == [["2ppl"], ["3ppl"], ["4ppl"], ["5ppl"], ["6ppl"]]
    assert plan[-1].dirname == "5-6ppl"


def test_stage_overrides_set_one_stage_by_name(make_cfg, tmp_path):
    """A learning rate for the 2ppl stage alone, from the command line; its GRPOConfig really trains at it."""
    from train.stages.grpo import grpo_config

    cfg = make_cfg("+curriculum=kk_ladder", "+curriculum.stages.0.overrides.beta=0.002",
                   "stage_overrides={2ppl: {learning_rate: 1.0e-6}, 6ppl: {temperature: 1.0}}")
    plan = build_plan(cfg)
    check_config(cfg, plan)
    assert plan[0].overrides == {"beta": 0.002, "learning_rate": 1e-6}, "merged over the stage's own overrides"
    assert plan[-1].overrides == {"temperature": 1.0} and plan[1].overrides == {}
    grpo = OmegaConf.to_container(cfg.grpo, resolve=True)
    rates = [grpo_config(grpo, stage, tmp_path / stage.name, seed=0, lora=None).learning_rate for stage in plan]
    assert rates == [1e-6, 4e-7, 4e-7, 4e-7, 4e-7]


def test_stage_overrides_sweep_as_hydra_splits_it(make_cfg):
    """A multirun over one stage's learning rate: Hydra's basic sweeper makes one job per mapping."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweep = "stage_overrides={2ppl: {learning_rate: 1.0e-6}},{2ppl: {learning_rate: 4.0e-7}}"
    (batch,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides([sweep]), max_batch_size=None)
    rates = [build_plan(make_cfg("+curriculum=kk_ladder", *job))[0].overrides["learning_rate"] for job in batch]
    assert rates == [1e-6, 4e-7]


def test_kk_mixed_matches_ladder_total_steps(make_cfg):
    ladder = build_plan(make_cfg("+curriculum=kk_ladder"))
    (mixed,) = build_plan(make_cfg("+curriculum=kk_mixed"))
    assert mixed.steps == sum(s.steps for s in ladder)
    assert mixed.level_weights == {f"{p}ppl": 0.2 for p in (2, 3, 4, 5, 6)}


def test_kk_logicrl_is_one_pass_over_900(make_cfg):
    cfg = make_cfg("+curriculum=kk_logicrl")
    plan = build_plan(cfg)
    assert [s.name for s in plan] == ["3ppl", "4ppl", "5ppl", "6ppl", "7ppl"]
    # 900 puzzles at 8 prompts per optimizer step (8 x 8 completions / 8 generations), the last partial
    # batch dropped as verl's dataloader drops it: 112 steps
    assert prompts_per_step(cfg.grpo) == 8
    assert {s.steps for s in plan} == {112} and {s.pool for s in plan} == {900}


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
    # a negative KL coefficient rewards drifting away from the reference (0 is allowed, with a warning)
    (("+curriculum=kk_ladder", "grpo.beta=-0.1"), "grpo.beta"),
    # a warmup's first optimizer step runs at learning rate 0 (it would not update the policy)
    (("+curriculum=kk_ladder", "grpo.warmup_steps=0.1"), "grpo.warmup_steps"),
    (("+curriculum=kk_r1", "+curriculum.stages.0.overrides.warmup_steps=5"),
     "curriculum.stages[0].overrides.warmup_steps"),
    # a stage at learning rate 0 never moves
    (("+curriculum=kk_ladder", "grpo.learning_rate=0"), "grpo.learning_rate"),
    # TRL divides the logits by the temperature: 0 passed the check and failed after the baseline validation
    (("+curriculum=kk_ladder", "grpo.temperature=0"), "grpo.temperature"),
    (("+curriculum=kk_ladder", "grpo.temperature=-0.5"), "grpo.temperature"),
    (("+curriculum=kk_ladder", "grpo.temperature=inf"), "grpo.temperature"),
    (("+curriculum=kk_ladder", "+curriculum.stages.2.overrides.temperature=0"),
     "curriculum.stages[2].overrides.temperature"),
    # the other sampling fields, each outside what transformers generates with
    (("+curriculum=kk_ladder", "grpo.top_p=0"), "grpo.top_p"),
    (("+curriculum=kk_ladder", "grpo.top_p=1.5"), "grpo.top_p"),
    (("+curriculum=kk_ladder", "grpo.top_k=-1"), "grpo.top_k"),
    (("+curriculum=kk_ladder", "+grpo.min_p=2.0"), "grpo.min_p"),
    (("+curriculum=kk_ladder", "+grpo.repetition_penalty=0.0"), "grpo.repetition_penalty"),
    # an open TRL group is typed by TRL's dataclass: a rate that is not a number (unchecked: int()'s traceback)
    (("+curriculum=kk_ladder", "grpo.learning_rate=abc"), "grpo.learning_rate"),
    # ... and a count that is not whole
    (("+curriculum=kk_ladder", "grpo.num_generations=4.5"), "grpo.num_generations"),
    # no room for a single completion token
    (("+curriculum=kk_ladder", "grpo.max_completion_length=0"), "grpo.max_completion_length"),
    # zero passes over each generation batch
    (("+curriculum=kk_ladder", "grpo.num_iterations=0"), "grpo.num_iterations"),
    # TRL takes generation_batch_size or steps_per_generation, never both
    (("+curriculum=kk_ladder", "+grpo.generation_batch_size=64", "+grpo.steps_per_generation=8"),
     "grpo.generation_batch_size"),
    # the reference is one of three named checkpoints
    (("+curriculum=kk_ladder", "reference=sft"), "reference"),
    # with LoRA the reference is the stage's own starting weights (adapters off)
    (("+curriculum=kk_ladder", "reference=base", "model.lora={r: 4}"), "reference"),
    # LoRA settings are checked before any model loads: a misspelt key would otherwise fail at the first stage
    (("+curriculum=kk_ladder", "model.lora={rank: 4}"), "model.lora.rank"),
    # a rank of 0 trains nothing
    (("+curriculum=kk_ladder", "model.lora={r: 0}"), "model.lora.r"),
    # a fractional scale would be cut to a whole number silently
    (("+curriculum=kk_ladder", "model.lora={r: 4, alpha: 2.5}"), "model.lora.alpha"),
    # a dropout of 1 or more drops every adapter input
    (("+curriculum=kk_ladder", "model.lora={r: 4, dropout: 1.5}"), "model.lora.dropout"),
    # adapters at learning rate 0 never move
    (("+curriculum=kk_ladder", "model.lora={r: 4, learning_rate: 0}"), "model.lora.learning_rate"),
    # PEFT takes a module name or a list of names
    (("+curriculum=kk_ladder", "model.lora={r: 4, target_modules: 7}"), "model.lora.target_modules"),
    # the SFT stage honours model.lora too, so its keys are checked for an SFT recipe as well
    (("+curriculum=kk_r1", "model.lora={r: 4, lr: 1e-4}"), "model.lora.lr"),
    # no CUDA here: experiment=single_gpu (device: cuda) is refused before anything loads
    (("+curriculum=kk_ladder", "device=cuda"), "device"),
    (("+curriculum=kk_ladder", "experiment=single_gpu"), "device"),
    # vLLM rollouts run on vLLM's CPU build here, but without sleep mode (CUDA's)
    (("+curriculum=kk_ladder", "+grpo.use_vllm=true", "+grpo.vllm_enable_sleep_mode=true"),
     "grpo.vllm_enable_sleep_mode"),
    # ... and are set for the whole run, never by one stage
    (("+curriculum=kk_ladder", "stage_overrides={2ppl: {use_vllm: true}}"), "stage_overrides.2ppl.use_vllm"),
    # a per-stage budget for a stage that does not exist (a typo would otherwise be ignored)
    (("+curriculum=kk_ladder", "++limits.stage_steps={7ppl: 3}"), "limits.stage_steps.7ppl"),
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
    # a validation backend that does not exist
    (("+curriculum=kk_ladder", "eval.backend=tgi"), "eval.backend"),
    (("+curriculum=kk_ladder", "data=local", "data.path=/nonexistent"), "data.path"),
    (("+curriculum=kk_ladder", "prompt.fmt=xml"), "prompt.fmt"),
    (("+curriculum=kk_ladder", "model.source=s3"), "model.source"),
    # the sweep objective must be something validation measures
    (("+curriculum=kk_ladder", "objective=final_accuracy_9ppl"), "objective"),
    # reward weights are checked too (a typo in a sweep key)
    (("+curriculum=kk_ladder", "+reward.weights.fromat=1"), "reward.weights.fromat"),
    # a negative answer weight trains wrong answers: refused unless reward.allow_negative_weights
    (("+curriculum=kk_ladder", "reward.weights.answer=-2"), "reward.weights.answer"),
    # a user's reward whose module does not exist
    (("+curriculum=kk_ladder", "+reward.custom.mine={_target_: my_missing_module.fn, _partial_: true}"),
     "reward.custom.mine._target_"),
    # ... that misses a setting the trainer cannot supply
    (("+curriculum=kk_ladder", "+reward.custom.mine={_target_: train.rewards.reward_group.low_token_share}"),
     "reward.custom.mine"),
    # ... that binds a keyword the function does not take
    (("+curriculum=kk_ladder",
      "+reward.custom.mine={_target_: train.rewards.reward_group.low_token_share, below: 3, bleow: 4}"),
     "reward.custom.mine"),
    # ... that would be called at load time instead of by the trainer
    (("+curriculum=kk_ladder",
      "+reward.custom.mine={_target_: train.rewards.reward_group.low_token_share, _partial_: false, below: 3}"),
     "reward.custom.mine._partial_"),
    # ... that takes a built-in component's name
    (("+curriculum=kk_ladder",
      "+reward.custom.format={_target_: train.rewards.reward_group.low_token_share, below: 3}"),
     "reward.custom.format"),
    # the validation plan is all or near
    (("+curriculum=kk_ladder", "eval.subsets_after_stage=some"), "eval.subsets_after_stage"),
    # a validation engine's share of the card is a share
    (("+curriculum=kk_ladder", "eval.vllm_gpu_memory_utilization=0"), "eval.vllm_gpu_memory_utilization"),
    # per-stage fields by stage name: a stage that does not exist (a typo would otherwise be ignored) ...
    (("+curriculum=kk_ladder", "stage_overrides={7ppl: {learning_rate: 1.0e-6}}"), "stage_overrides.7ppl"),
    # ... fields given as something other than a mapping
    (("+curriculum=kk_ladder", "stage_overrides={2ppl: 1.0e-6}"), "stage_overrides.2ppl"),
    # ... a misspelt GRPOConfig field, named under stage_overrides where it was written
    (("+curriculum=kk_ladder", "stage_overrides={2ppl: {lerning_rate: 1.0e-6}}"), "stage_overrides.2ppl.lerning_rate"),
    # ... a stage that would never update, or whose groups do not divide its generation batch
    (("+curriculum=kk_ladder", "stage_overrides={3ppl: {learning_rate: 0}}"), "stage_overrides.3ppl.learning_rate"),
    (("+curriculum=kk_ladder", "stage_overrides={2ppl: {num_generations: 5}}"), "stage_overrides.2ppl.num_generations"),
    # ... an SFT stage takes SFTConfig fields
    (("+curriculum=kk_r1", "stage_overrides={sft: {num_generations: 4}}"), "stage_overrides.sft.num_generations"),
    # ... a bad value in the curriculum's own overrides is still named there, beside a good stage_overrides entry
    (("+curriculum=kk_ladder", "+curriculum.stages.0.overrides.num_generations=5",
      "stage_overrides={2ppl: {learning_rate: 1.0e-6}}"), "curriculum.stages[0].overrides.num_generations"),
]


@pytest.mark.parametrize(("overrides", "key"), BAD_CONFIGS, ids=[k for _, k in BAD_CONFIGS])
def test_bad_config_names_the_key(make_cfg, overrides, key):
    with pytest.raises(ConfigError) as err:  # refused while composing (the schema) or by the checks after it
        cfg = make_cfg(*overrides)
        check_config(cfg, build_plan(cfg))
    assert str(err.value).startswith(key), str(err.value)


def test_good_configs_pass(make_cfg):
    for curriculum in ("kk_ladder", "kk_logicrl", "kk_mixed"):
        cfg = make_cfg(f"+curriculum={curriculum}")
        check_config(cfg, build_plan(cfg))


@pytest.mark.parametrize(("overrides", "prompts", "steps"), [
    # Logic-RL's batch: 8 x 8 completions = 8 prompts of 8 per optimizer step: 900 / 8 -> 113 steps
    ((), 8, 113),
    # each generation batch used twice (num_iterations 2): half the new prompts per step, twice the steps
    (("grpo.num_iterations=2",), 4, 225),
    # a generation batch of 16 micro-batches feeds two optimizer steps: still 8 new prompts per step
    (("+grpo.steps_per_generation=16",), 8, 113),
    # a bigger generation batch given directly (128 completions over 16 micro-batches): the same
    (("+grpo.generation_batch_size=128",), 8, 113),
    # fewer completions per optimizer step: 2 prompts
    (("grpo.gradient_accumulation_steps=2",), 2, 450),
])
def test_epochs_become_steps_by_trls_batch_arithmetic(make_cfg, overrides, prompts, steps):
    cfg = make_cfg("+curriculum=kk_logicrl", *overrides)
    cfg.curriculum.stages = [StageConfig(name=f"{p}ppl", ppl=p, epochs=1, pool=900) for p in range(3, 8)]
    assert prompts_per_step(cfg.grpo) == prompts
    assert {s.steps for s in build_plan(cfg)} == {steps}


def test_single_gpu_composes_into_a_valid_config_where_cuda_and_vllm_exist(make_cfg, monkeypatch):
    """This CPU refuses experiment=single_gpu (BAD_CONFIGS); on a CUDA box with vLLM every field is valid
    and vLLM's memory share is sized from the card (a unit test's edge: CUDA and vLLM are pretended)."""
    import importlib.util

    import torch

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else
                        real_find_spec(name, *a))
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=single_gpu")
    check_config(cfg, build_plan(cfg))
    assert cfg.grpo.vllm_gpu_memory_utilization == pytest.approx(7 / 24, abs=1e-3)
    assert make_cfg("+curriculum=kk_ladder", "experiment=single_gpu", "gpu.memory_gb=80"
                    ).grpo.vllm_gpu_memory_utilization == pytest.approx(7 / 80, abs=1e-3)
    assert (cfg.grpo.optim, cfg.grpo.use_vllm, cfg.grpo.vllm_mode) == ("adamw_8bit", True, "colocate")
