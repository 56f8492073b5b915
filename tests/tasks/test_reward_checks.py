"""Reward drills: a user's reward that breaks stops its stage with an error naming it, through a real stage (and
the wrapper called as TRL calls it, for the inputs a reward changes).

TRL 1.16 alone gives a TypeError or ValueError that does not name the reward (None, strings), trains on
nothing and ends "done" (inf), or waits forever (a hang)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from core.rundir.files import read_jsonl
from train.run.runner import run_curriculum
from train.settings import read_settings

ONE_STEP = ["+curriculum=kk_ladder", "experiment=smoke", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 4}]",
            "eval.subsets=[2]"]


def _with_reward(make_cfg, target: str, *more: str):
    return make_cfg(*ONE_STEP, f"+reward.custom.mine={{_target_: tests.broken_rewards.{target}, _partial_: true}}",
                    *more)


@pytest.mark.run
@pytest.mark.parametrize("target, message", [
    ("returns_none", r"reward mine: returned None, not a list of one number \(or None\) per completion \(4 comp"),
    ("returns_strings", r"reward mine: completion 0 scored str '1.0', not a number \(or None: no score\)"),
    ("returns_inf", r"reward mine: completion 0 scored inf, not finite in float32"),
    ("returns_beyond_float32", r"reward mine: completion 0 scored 1e\+39, not finite in float32"),
    # was blamed on its length ("returned 4 scores for 5 completions") after the rewards after it saw 5
    ("appends_to_completions", r"reward mine: changed its input completions: 4 items, then 5 in place; .* Copy "),
])
def test_a_reward_returning_what_is_not_a_score_stops_the_stage_naming_it(tmp_path, make_cfg, target, message):
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match=message):
        run_curriculum(read_settings(_with_reward(make_cfg, target)), run_dir)
    stage = json.loads((run_dir / "run.json").read_text())["stages"][0]
    assert stage["status"] == "failed" and "reward mine" in stage["error"], "run.json names it too"


@pytest.mark.run
def test_rewards_that_sum_past_float32_stop_the_stage_rather_than_train_on_nothing(tmp_path, make_cfg):
    """Each reward is finite in float32 (3e38), so each passes its check, but TRL's weighted sum is inf: every
    advantage NaN, the loss and grad_norm 0. The stage must stop on the reward, never end done."""
    run_dir = tmp_path / "run"
    again = "+reward.custom.again={_target_: tests.broken_rewards.returns_near_float32_max, _partial_: true}"
    cfg = _with_reward(make_cfg, "returns_near_float32_max", again)
    with pytest.raises(RuntimeError, match=r"the reward \(inf\) became non-finite"):
        run_curriculum(read_settings(cfg), run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["stages"][0]["status"] == "failed"


@pytest.mark.run
@pytest.mark.parametrize("target", ["hangs", "hangs_async"])
def test_a_reward_that_hangs_stops_the_stage_after_its_timeout(tmp_path, make_cfg, target):
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match=r"reward mine: no result after 2 s \(reward.timeout_s\)"):
        run_curriculum(read_settings(_with_reward(make_cfg, target, "reward.timeout_s=2")), run_dir)


@pytest.mark.run
def test_a_reward_that_scores_no_completion_of_a_batch_is_reported_once_per_stage(tmp_path, make_cfg, caplog):
    run_dir = tmp_path / "run"
    cfg = _with_reward(make_cfg, "returns_nan", "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 8}]")
    with caplog.at_level(logging.WARNING, logger="train.rewards.checks"):
        run_curriculum(read_settings(cfg), run_dir)  # the run goes on: the other rewards still score every completion
    said = [r.getMessage() for r in caplog.records if "reward mine: scored none" in r.getMessage()]
    assert len(said) == 1, "said once for the stage's two batches"
    stage = json.loads((run_dir / "run.json").read_text())["stages"][0]
    assert [(w["reward"], w["stage_step"]) for w in stage["warnings"]] == [("mine", 1)]
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert [r["rewards/mine/scored_share"] for r in steps] == [0.0, 0.0]


@pytest.mark.run
def test_none_for_some_completions_is_trls_no_score_and_passes(tmp_path, make_cfg):
    run_dir = tmp_path / "run"
    run_curriculum(read_settings(_with_reward(make_cfg, "scores_half")), run_dir)
    stage = json.loads((run_dir / "run.json").read_text())["stages"][0]
    assert stage["status"] == "done" and stage["warnings"] == []
    assert [r["rewards/mine/scored_share"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"] \
        == [0.5]


@pytest.mark.run
@pytest.mark.parametrize("value", ["0", "-1", "abc"])  # none is a number of seconds > 0
def test_a_timeout_that_is_not_seconds_is_a_config_error(tmp_path, make_cfg, value):
    from core.checks import ConfigError

    with pytest.raises(ConfigError, match=r"^reward.timeout_s: "):
        run_curriculum(read_settings(make_cfg(*ONE_STEP, f"reward.timeout_s={value}")), tmp_path / "run")
    assert not (tmp_path / "run").exists()


# Each score as TRL trains it: cast to float32 (its rewards tensor). What that cast keeps finite passes.
@pytest.mark.parametrize(("value", "refused"), [
    (3.4e38, False),  # below float32's largest (3.4028e38)
    (-3.4e38, False),
    (1e-45, False),  # below float32's smallest: 0 in float32, still a finite score
    (3.5e38, True),  # float32 rounds it to inf
    (1e39, True), (1e308, True), (-1e39, True),
    (10 ** 400, True),  # an int beyond even float64
    (float("inf"), True), (float("-inf"), True),
])
def test_a_score_is_checked_in_float32_the_dtype_trl_trains_it_in(value, refused):
    from train.rewards.checks import RewardError, scores

    if not refused:
        assert scores("mine", [value, 0.0], 2) == [float(value), 0.0]
        return
    with pytest.raises(RewardError, match=r"^reward mine: completion 0 scored .*, not finite in float32"):
        scores("mine", [value, 0.0], 2)


def test_nan_is_still_no_score():
    from train.rewards.checks import scores

    assert scores("mine", [float("nan"), 1.0], 2) == [None, 1.0]


def _trl_inputs() -> dict:
    """A batch of two conversational completions as TRL 1.16 passes it to each reward: its lists, its columns and
    its handles (the state, the loggers)."""
    return {"prompts": [[{"role": "user", "content": "Who is a knight?"}]] * 2,
            "completions": [[{"role": "assistant", "content": "<answer>Zoey</answer>"}],
                            [{"role": "assistant", "content": "<answer>Oliver</answer>"}]],
            "completion_ids": [[11, 12, 13], [14, 15]], "names": [["Zoey", "Oliver"], ["Zoey", "Oliver"]],
            "solution": [[True, False], [True, False]], "id": ["2ppl-0", "2ppl-0"],
            "trainer_state": SimpleNamespace(global_step=0),
            "log_extra": lambda *a: None, "log_metric": lambda *a: None}


def pure(completions, **kwargs):
    return [1.0] * len(completions)


def edits_a_copy(completions, **kwargs):
    import copy

    mine = copy.deepcopy(completions)
    mine[0][0]["content"] = mine[0][0]["content"].strip("<>")
    mine.append([])
    return [1.0] * len(completions)


def appends(completions, **kwargs):
    completions.append([{"role": "assistant", "content": ""}])
    return [0.0, 0.0]


def edits_a_message(completions, **kwargs):
    completions[1][0]["content"] = completions[1][0]["content"].removeprefix("<answer>")
    return [0.0, 0.0]


def edits_a_column(completions, names, **kwargs):
    names[0].sort()  # one sample's names in another order: the grader would read positions wrongly
    return [0.0, 0.0]


def drives_the_state(completions, trainer_state, **kwargs):
    trainer_state.seen = True  # TRL's handle, not an input: a reward may keep its own notes on it
    return [0.0, 0.0]


async def appends_async(completions, **kwargs):
    completions.append([])
    return [0.0, 0.0]


# (reward, what the error names as changed, or None: it passes)
INPUT_CASES = [
    (pure, None),  # reads its inputs only
    (edits_a_copy, None),  # deep-copies before editing: TRL's lists are as they were
    (drives_the_state, None),  # trainer_state is a handle TRL passes, not data another reward scores
    (appends, r"completions: 2 items, then 3"),  # the list grew: later rewards would score 3 completions
    (edits_a_message, r"completions\[1\]"),  # a dict inside a conversational completion edited in place
    (edits_a_column, r"names\[0\]"),  # a per-sample column TRL hands every reward, reordered
]


@pytest.mark.parametrize(("func", "changed"), INPUT_CASES, ids=[f.__name__ for f, _ in INPUT_CASES])
def test_a_reward_that_changes_its_inputs_stops_naming_it_and_the_input(func, changed):
    from train.rewards.checks import RewardError, checked_rewards

    (reward,) = checked_rewards([func], timeout_s=None)
    if changed is None:
        assert len(reward(**_trl_inputs())) == 2
        return
    with pytest.raises(RewardError, match=rf"^reward {func.__name__}: changed its input {changed} in place; .*"
                                          r"Copy before editing"):
        reward(**_trl_inputs())


def test_an_async_reward_that_changes_its_inputs_names_the_async_rewards_awaited_beside_it():
    import asyncio

    from train.rewards.checks import RewardError, checked_rewards

    async def pure_async(completions, **kwargs):
        return [1.0] * len(completions)

    rewards = checked_rewards([pure, appends_async, pure_async], timeout_s=5)
    inputs = _trl_inputs()
    assert rewards[0](**inputs) == [1.0, 1.0]  # the sync reward runs first, on the inputs as they are

    async def step():  # as TRL awaits the async rewards of a step: together
        return await asyncio.gather(*(reward(**inputs) for reward in rewards[1:]))

    with pytest.raises(RewardError, match=r"^reward appends_async: its input completions: 2 items, then 3 was "
                                          r"changed in place while it ran, by it or by an async reward TRL awaited "
                                          r"beside it \(pure_async\)"):
        asyncio.run(step())


def test_each_stage_wraps_the_runs_rewards_anew():
    from train.rewards.checks import checked_rewards, task_reward

    def unscored(completions, **kwargs):
        return [None] * len(completions)

    built = [task_reward("unscored", unscored)]  # the run's, built once (reward_stack), handed to every stage
    first_stage, second_stage = [], []
    (first,) = checked_rewards(built, timeout_s=None, warn=first_stage.append, group_size=2)
    first(**_trl_inputs())
    (second,) = checked_rewards(built, timeout_s=5, warn=second_stage.append)
    second(**_trl_inputs())
    # each stage's run.json entry gets its own warning: the first stage's "said once" does not silence the second
    assert len(first_stage) == len(second_stage) == 1
    # and its own settings: the second stage's time limit and group size leave the first's wrapper as it was
    assert (first.timeout_s, first.group_size, second.timeout_s, second.group_size) == (None, 2, 5, None)
