"""The run's reward stack (train/rewards/reward_group.py `reward_stack`): every component TRL weighs, by its config
key, with its weight and where the weight came from, as run.json records it and the console, wandb and the report
show it; and the report's header reads that record, not config.yaml."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest
from trl.trainer.utils import get_callable_name

from core.checks import ConfigError
from curriculum.tasks.gsm8k import GSM8KTask
from curriculum.tasks.kk import KKTask
from eval.report import cli as report
from train.rewards.reward_group import reward_stack
from train.settings import read_settings

W, D, C, L = "reward.weights", "task default", "reward.custom", "logged"


class WeightedKK(KKTask):
    """K&K as a task brought by import path would declare its reward: default weights of its own."""

    default_weights = {"format": 0.25, "answer": 1.0}


CASES = [
    # the default file: its non-zero weights, each given by the file (reward.weights)
    (("reward=default",), [("format", 0.5, W), ("answer", 2.0, W), ("overlong", 0.5, W)]),
    # partial credit instead of the answer: the answer still runs at weight 0 so its mean is logged
    (("reward=partial",), [("format", 0.5, W), ("answer", 0.0, L), ("partial", 2.0, W), ("overlong", 0.5, W)]),
    # the smoke experiment's probe reward, a custom reward at its default weight 1
    (("experiment=smoke",), [("format", 0.5, W), ("answer", 2.0, W), ("overlong", 0.5, W), ("low_tokens", 1.0, C)]),
    # the probe with a weight of its own: the weight is reward.weights'
    (("experiment=smoke", "+reward.weights.low_tokens=0.25"),
     [("format", 0.5, W), ("answer", 2.0, W), ("overlong", 0.5, W), ("low_tokens", 0.25, W)]),
    # a weight of 0 leaves a component out (no always_rewarded for it)
    (("reward.weights.overlong=0",), [("format", 0.5, W), ("answer", 2.0, W)]),
]


@pytest.mark.parametrize(("overrides", "expected"), CASES)
def test_every_component_with_its_weight_and_where_it_came_from(make_cfg, overrides, expected):
    cfg = make_cfg("+curriculum=kk_ladder", *overrides)
    funcs, stack = reward_stack(cfg.reward, KKTask(fmt=str(cfg.prompt.fmt)), fmt=str(cfg.prompt.fmt),
                                max_completion_length=int(cfg.grpo.max_completion_length))
    assert [(c.name, c.weight, c.source) for c in stack] == expected
    # TRL names each reward by get_callable_name (rewards/<name>/mean): the component's key, for built-ins and custom
    assert [get_callable_name(f) for f in funcs] == [name for name, _, _ in expected]
    assert [get_callable_name(f) for f in pickle.loads(pickle.dumps(funcs))] == [name for name, _, _ in expected]


OWN_TASK = ("task=custom", f"task._target_={__name__}.WeightedKK")
OWN_CASES = [
    # task=custom picks reward=task: every weight is the task's own
    ((), [("format", 0.25, D), ("answer", 1.0, D)]),
    # one of them overridden on the command line: that one is reward.weights', the other the task's
    (("+reward.weights.format=1",), [("format", 1.0, W), ("answer", 1.0, D)]),
    # a component the task leaves out, added: the task's two beside it
    (("+reward.weights.overlong=0.5",), [("format", 0.25, D), ("answer", 1.0, D), ("overlong", 0.5, W)]),
    # a reward file on the command line wins over the task's choice, and its weights over the task's defaults
    (("reward=partial",), [("format", 0.5, W), ("answer", 0.0, L), ("partial", 2.0, W), ("overlong", 0.5, W)]),
]


@pytest.mark.parametrize(("overrides", "expected"), OWN_CASES)
def test_a_task_by_import_path_runs_its_default_weights(make_cfg, overrides, expected):
    cfg = make_cfg("+curriculum=ladder", *OWN_TASK, *overrides)
    _, stack = reward_stack(cfg.reward, WeightedKK(), fmt=str(cfg.prompt.fmt), max_completion_length=64)
    assert [(c.name, c.weight, c.source) for c in stack] == expected


@pytest.mark.parametrize(("task", "message"), [
    # a built-in task's weights are its reward files' alone: reward=task names them
    (GSM8KTask(source="sample"), "reward.weights: none given, and task gsm8k declares no default_weights; choose a "
     "reward of gsm8k's: reward=gsm8k_stack | gsm8k_stack_gist | gsm8k_stack_verbatim (its components: correctness,"),
    (KKTask(), "reward.weights: none given, and task kk declares no default_weights; choose a reward of kk's: "
     "reward=default | logic_rl_strict | partial | tiered (its components: format, think,"),
])
def test_reward_task_on_a_task_without_default_weights_names_its_reward_files(make_cfg, task, message):
    with pytest.raises(ConfigError) as err:
        reward_stack(make_cfg("reward=task").reward, task, fmt="reasoning_answer", max_completion_length=64)
    assert str(err.value).startswith(message), str(err.value)


def test_a_built_in_tasks_reward_file_and_an_override_name_its_keys(make_cfg):
    cfg = make_cfg("+curriculum=gsm8k_grpo", "reward.weights.integer=0")
    funcs, stack = reward_stack(cfg.reward, GSM8KTask(source="sample"), fmt=str(cfg.prompt.fmt),
                                max_completion_length=200)
    # integer at weight 0 is left out (GSM8K runs none at weight 0); the rest are reward=gsm8k_stack's
    assert [dataclasses.asdict(part) for part in stack] == [
        {"name": n, "weight": w, "source": W}
        for n, w in (("correctness", 2.0), ("strict_format", 0.5), ("soft_format", 0.5), ("xml_count", 0.5))]
    assert [f([" <answer>\n7\n</answer>"], answer=["7"])[0] for f in funcs[:1]] == [1.0]  # still the function


def test_a_run_without_a_grpo_stage_records_no_stack(make_cfg):
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke",
                   "curriculum.stages=[{name: s, kind: sft, ppl: 2, steps: 1, pool: 4}]", "eval.subsets=[2]")
    assert read_settings(cfg).reward_stack is None
    assert read_settings(make_cfg("+curriculum=kk_ladder", "experiment=smoke")).reward_stack[-1] == {
        "name": "low_tokens", "weight": 1.0, "source": C}


def test_the_report_header_shows_run_jsons_stack_not_config_yamls_weights(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    stack = [{"name": "correct", "weight": 1.0, "source": D},
             {"name": "low_tokens", "weight": 1.0, "source": "reward.custom"}]
    (run / "run.json").write_text(json.dumps({"status": "done", "stages": [], "reward_stack": stack}))
    # config.yaml's reward.weights hold only what the file said (the task's default weights are not in it)
    (run / "config.yaml").write_text(json.dumps({"reward": {"task": None, "weights": {"short": 0.5}}}))
    text = (report.write_report(run) / "report.md").read_text()
    assert "**reward stack** correct 1 (task default), low_tokens 1 (reward.custom)" in text
    assert "short 0.5" not in text
