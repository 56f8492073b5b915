"""Tests of K&K's rewards (curriculum/tasks/kk/rewards.py) as a run builds them (train/rewards/reward_group.py): each
component's values, every preset's tier table, config errors, TRL's calling convention, and grading once
per completion per batch."""

from __future__ import annotations

import pickle

import pytest
import yaml
from trl.trainer.utils import get_callable_name

import curriculum.tasks.kk.rewards as rewards
from core.checks import ConfigError
from curriculum.tasks.kk import KKTask
from curriculum.tasks.kk.rewards import (
    COMPONENTS,
    TIERED_SCHEMES,
    answer_reward,
    format_reward,
    overlong_reward,
    partial_reward,
    think_reward,
    tiered_reward,
)
from tests.conftest import ROOT
from train.rewards.reward_group import task_reward_funcs

# K&K's presets; a preset for another task names it (`task: gsm8k`) and is tested with that task.
PRESETS = sorted(p.stem for p in (ROOT / "conf" / "reward").glob("*.yaml")
                 if (yaml.safe_load(p.read_text()) or {}).get("task", "kk") == "kk")
NAMES, SOLUTION = ["Zoey", "Oliver"], [False, True]
RIGHT = "Zoey is a knave, and Oliver is a knight."


def build_reward_funcs(reward_cfg, *, fmt: str, max_completion_length: int):
    """K&K's (functions, weights) as a K&K run builds them."""
    return task_reward_funcs(reward_cfg, KKTask(fmt=fmt), fmt=fmt, max_completion_length=max_completion_length)


def think_answer(answer: str) -> str:
    return f"<think>Zoey's claim fails.</think>\n<answer>{answer}</answer>"


# One completion per tier, per prompt format: (tier, completion).
TIER_EXAMPLES = {
    "think_answer": [
        ("no_format", RIGHT),  # right words, no tags at all
        ("half_format", f"<answer>{RIGHT}</answer>"),  # answer block without the think block
        ("unparsed", think_answer("Zoey might be a knave.")),  # format fine, Zoey hedged, Oliver missing
        ("wrong", think_answer("Zoey is a knight, and Oliver is a knave.")),  # every role given, wrong
        ("correct", think_answer(RIGHT)),
    ],
    "answer_only": [
        ("no_format", RIGHT),
        ("half_format", f"<answer>{RIGHT}"),  # block never closed
        ("unparsed", "<answer>I cannot determine it.</answer>"),
        ("wrong", "<answer>Both are knights.</answer>"),
        ("correct", f"<answer>{RIGHT}</answer>"),
    ],
    "logic_rl": [
        ("no_format", RIGHT),  # the pre-filled <think> is never closed: no tag of the model's own
        ("half_format", think_answer(RIGHT)),  # a second <think>
        ("unparsed", "Hmm.</think><answer>Oliver is a knight.</answer>"),  # Zoey missing
        ("wrong", "Hmm.</think><answer>(1) Zoey is a knight\n(2) Oliver is a knight</answer>"),
        ("correct", f"Hmm.</think><answer>{RIGHT}</answer>"),
    ],
}
# The seeds' schemes as the brief gives them (tiers: no format, half format, wrong, correct).
SCHEME_VALUES = {
    "seed_v1": {"no_format": -5, "half_format": 1, "unparsed": 3, "wrong": 3, "correct": 5},
    "seed_v2": {"no_format": -1, "half_format": -0.3, "unparsed": 0.3, "wrong": 0.3, "correct": 5},
    "seed_v4_instruct": {"no_format": -1, "half_format": -1, "unparsed": -0.1, "wrong": -0.1, "correct": 5},
    # Logic-RL totals: format -1 & answer -2 -> -3; format +1 & unparseable -2 -> -1; +1 & -1.5; +1 & +2
    "logic_rl": {"no_format": -3, "half_format": -3, "unparsed": -1, "wrong": -0.5, "correct": 3},
}


def batch(completions):
    n = len(completions)
    return {"completions": completions, "names": [NAMES] * n, "solution": [SOLUTION] * n}


@pytest.fixture
def load_preset(make_cfg):
    """load_preset(name): a reward preset as a run sees it, composed by Hydra (presets are deltas on
    reward/default.yaml)."""
    return lambda name: make_cfg(f"reward={name}").reward


def test_the_schemes_are_the_seeds():
    assert TIERED_SCHEMES == SCHEME_VALUES


@pytest.mark.parametrize("fmt", sorted(TIER_EXAMPLES))
@pytest.mark.parametrize("scheme", sorted(TIERED_SCHEMES))
def test_tiered_reward_reproduces_each_scheme(scheme, fmt):
    tiers, completions = zip(*TIER_EXAMPLES[fmt], strict=True)
    values = tiered_reward(**batch(list(completions)), fmt=fmt, table=TIERED_SCHEMES[scheme])
    assert values == [SCHEME_VALUES[scheme][t] for t in tiers]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_reproduces_its_scheme(preset, load_preset):
    cfg = load_preset(preset)
    assert set(cfg) == {"task", "weights", "overlong", "tiered", "custom", "allow_negative_weights", "timeout_s"}
    assert cfg.task == "kk"  # K&K's components, weighed by the file itself
    assert set(cfg.weights) == set(COMPONENTS)
    assert not cfg.tiered.table, "one source for each tier table: the code's (TIERED_SCHEMES)"
    assert rewards.tier_table(cfg.tiered) == SCHEME_VALUES[cfg.tiered.scheme]
    funcs, weights = build_reward_funcs(cfg, fmt="think_answer", max_completion_length=256)
    by_name = dict(zip([f.__name__ for f in funcs], weights, strict=True))
    assert by_name == {k: float(w) for k, w in cfg.weights.items() if w != 0 or k == "answer"}  # TRL logs the keys
    if "tiered" in by_name:
        tiers, completions = zip(*TIER_EXAMPLES["think_answer"], strict=True)
        tiered = next(f for f in funcs if f.__name__ == "tiered")
        assert tiered(**batch(list(completions))) == [SCHEME_VALUES[cfg.tiered.scheme][t] for t in tiers]


@pytest.mark.parametrize("scheme", sorted(TIERED_SCHEMES))
def test_each_scheme_is_a_value_of_the_tiered_preset(scheme, make_cfg):
    """One tiered preset, its table a value: each scheme's table reaches the tiered component, the weights stay."""
    cfg = make_cfg("reward=tiered", f"reward.tiered.scheme={scheme}").reward
    funcs, weights = build_reward_funcs(cfg, fmt="think_answer", max_completion_length=256)
    assert dict(zip([f.__name__ for f in funcs], weights, strict=True)) == {"answer": 0.0, "tiered": 1.0}
    tiers, completions = zip(*TIER_EXAMPLES["think_answer"], strict=True)
    assert funcs[-1](**batch(list(completions))) == [SCHEME_VALUES[scheme][t] for t in tiers]


def test_default_preset_is_the_documented_mix(load_preset):
    funcs, weights = build_reward_funcs(load_preset("default"), fmt="think_answer", max_completion_length=512)
    assert [f.__name__ for f in funcs] == ["format", "answer", "overlong"]
    assert weights == [0.5, 2.0, 0.5]


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_compose_and_sweep_with_hydra(preset, make_cfg):
    cfg = make_cfg(f"reward={preset}", "reward.weights.format=1", "++reward.tiered.table.correct=7")
    funcs, weights = build_reward_funcs(cfg.reward, fmt="logic_rl", max_completion_length=256)
    assert dict(zip([f.__name__ for f in funcs], weights, strict=True))["format"] == 1.0
    assert rewards.tier_table(cfg.reward.tiered)["correct"] == 7.0


COMPONENT_CASES = [
    # strict format: tags once each, in order, nothing after </answer>
    (format_reward, think_answer(RIGHT), 1.0),
    # text after </answer> fails the strict format
    (format_reward, think_answer(RIGHT) + " Done.", 0.0),
    # non-empty reasoning in <think>
    (think_reward, think_answer(RIGHT), 1.0),
    # an empty think block earns nothing
    (think_reward, f"<think> </think><answer>{RIGHT}</answer>", 0.0),
    # correct answer, any format
    (answer_reward, f"<answer>{RIGHT}</answer> trailing", 1.0),
    # one role wrong
    (answer_reward, think_answer("Both are knights."), 0.0),
    # correct
    (partial_reward, think_answer(RIGHT), 1.0),
    # both roles given, one right: 0.3 + 0.7 * 1/2
    (partial_reward, think_answer("Both are knights."), 0.65),
    # both given, both wrong: the floor
    (partial_reward, think_answer("Zoey is a knight, Oliver is a knave."), 0.3),
    # someone missing: nothing
    (partial_reward, think_answer("Oliver is a knight."), 0.0),
    # no answer block: nothing
    (partial_reward, "<think>x</think>", 0.0),
]


@pytest.mark.parametrize(("func", "completion", "expected"), COMPONENT_CASES)
def test_component_values(func, completion, expected):
    assert func(**batch([completion])) == [expected]


@pytest.mark.parametrize(("length", "expected"), [
    (0, 0.0), (384, 0.0),  # up to max - buffer: no penalty
    (385, -1 / 128), (448, -0.5), (511, -127 / 128),  # linear in the buffer
    (512, -1.0), (600, -1.0),  # at the limit: truncated
])
def test_overlong_reward(length, expected):
    values = overlong_reward(**batch(["x"]), completion_ids=[[7] * length], max_completion_length=512,
                             buffer=128)
    assert values == [pytest.approx(expected)]


def test_overlong_reward_needs_token_ids():
    with pytest.raises(ValueError, match="completion_ids"):
        overlong_reward(**batch(["x"]), max_completion_length=512)


def test_bound_components_take_trls_call():
    funcs, _ = build_reward_funcs(
        {"weights": dict.fromkeys(COMPONENTS, 1.0), "overlong": {"buffer": 32},
         "tiered": {"scheme": "logic_rl"}},
        fmt="logic_rl", max_completion_length=64,
    )
    completions = [[{"role": "assistant", "content": f"ok</think><answer>{RIGHT}</answer>"}], "no tags"]
    trl_kwargs = {
        # a logic_rl prompt ends with the pre-filled <think> (Logic-RL's parser reads prompt + completion)
        "prompts": ["<|im_start|>assistant\n<think>"] * 2, "completion_ids": [[1] * 10, [1] * 64],
        "trainer_state": object(),
        "log_metric": print, "log_extra": print, "ppl": [2, 2], "id": ["a", "b"], "fmt": ["junk", "junk"],
    }
    values = {get_callable_name(f): f(**batch(completions), **trl_kwargs) for f in funcs}
    assert values == {
        "format": [1.0, 0.0], "think": [1.0, 0.0], "answer": [1.0, 0.0],
        "partial": [1.0, 0.0], "overlong": [0.0, -1.0], "tiered": [3.0, -3.0],
        "logic_rl_strict": [3.0, -3.0],
    }


def test_overlong_buffer_is_capped_at_the_completion_length():
    funcs, _ = build_reward_funcs({"weights": {"overlong": 1}}, fmt="think_answer", max_completion_length=16)
    assert funcs[-1](**batch(["x", "x"]), completion_ids=[[1] * 8, [1] * 16]) == [-0.5, -1.0]


def test_answer_reward_is_kept_at_weight_zero_and_others_are_dropped():
    funcs, weights = build_reward_funcs({"weights": {"partial": 1}}, fmt="answer_only",
                                        max_completion_length=64)
    assert [f.__name__ for f in funcs] == ["answer", "partial"]
    assert weights == [0.0, 1.0]


def test_bound_components_pickle(load_preset):
    funcs, _ = build_reward_funcs(load_preset("tiered"), fmt="logic_rl", max_completion_length=64)
    clone = pickle.loads(pickle.dumps(funcs))
    assert [f.__name__ for f in clone] == [f.__name__ for f in funcs]
    assert clone[-1](**batch(["x"])) == [-3.0]


def test_each_completion_is_graded_once_per_batch(monkeypatch):
    calls = []
    real = rewards.grade
    monkeypatch.setattr(rewards, "grade", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    rewards._graded.cache_clear()  # the memo is the process's: earlier tests graded these completions
    funcs, _ = build_reward_funcs({"weights": dict.fromkeys(COMPONENTS, 1.0)}, fmt="think_answer",
                                  max_completion_length=64)
    completions = [think_answer(RIGHT), think_answer("Both are knights."), think_answer(RIGHT)]
    for f in funcs:
        f(**batch(completions), completion_ids=[[1]] * 3, prompts=["p"] * 3)
    assert len(calls) == 2  # two distinct completions, the grader's six components (logic_rl_strict: its own)


@pytest.mark.parametrize(("cfg", "message"), [
    # a typo in a component name would silently weigh nothing
    ({"weights": {"fromat": 1}}, "reward.weights.fromat: unknown component; known: format, think"),
    # a NaN weight would make every advantage NaN
    ({"weights": {"format": float("nan")}}, "reward.weights.format: nan"),
    # nothing to learn from
    ({"weights": {"answer": 0}}, "reward.weights: every weight is 0"),
    # a scheme that does not exist
    ({"tiered": {"scheme": "seed_v3"}}, "reward.tiered.scheme: 'seed_v3' unknown; known: custom, seed_v1"),
    # a tier that does not exist would be ignored
    ({"tiered": {"table": {"corect": 1}}}, "reward.tiered.table.corect: unknown tier; known: no_format"),
    # a custom table must say what a format failure, a wrong and a right answer earn
    ({"tiered": {"scheme": "custom", "table": {"correct": 1}}}, "reward.tiered.table.no_format: required"),
])
def test_config_errors_name_the_key(cfg, message):
    with pytest.raises(ConfigError) as err:
        build_reward_funcs({"weights": {"answer": 1}, **cfg}, fmt="think_answer", max_completion_length=64)
    assert str(err.value).startswith(message)


# Wrong types and unknown keys of the reward group (and the prompt format) are the schema's to refuse
# (conf/schema.py), while Hydra composes, before build_reward_funcs runs; they were its own checks once.
@pytest.mark.parametrize(("override", "message"), [
    # a weight that is not a number
    ("reward.weights.format=high", "reward.weights.format: Value 'high'"),
    # YAML's true is an int to Python: it must not pass as weight 1
    ("reward.weights.format=true", "reward.weights.format: Value 'True' of type 'bool'"),
    # weights are a mapping of component names
    ("reward.weights=[1,2]", "reward.weights: "),
    # a misspelt key of the group, named with the closest real one
    ("+reward.wieghts={}", "reward.wieghts: not a config key; did you mean reward.weights?"),
    # a buffer of 1.5 tokens
    ("reward.overlong.buffer=1.5", "reward.overlong.buffer: Value '1.5' of type 'float'"),
    ("+reward.overlong.bufer=8", "reward.overlong.bufer: not a config key; did you mean reward.overlong.buffer?"),
    # a tier value that is not a number
    ("++reward.tiered.table.correct=five", "reward.tiered.table.correct: Value 'five'"),
    # a prompt format the grader does not know
    ("prompt.fmt=r1", "prompt.fmt: Invalid value 'r1', expected one of [think_answer, answer_only, logic_rl, "
                      "reasoning_answer, answer_tag]"),
])
def test_reward_keys_and_types_are_the_schemas(make_cfg, override, message):
    with pytest.raises(ConfigError) as err:
        make_cfg(override)
    assert str(err.value).startswith(message), str(err.value)
