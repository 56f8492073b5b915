"""Reward drills: a user's reward that breaks stops its stage with an error naming it, through a real stage.

TRL 1.16 alone gives a TypeError or ValueError that does not name the reward (None, strings), trains on
nothing and ends "done" (inf), or waits forever (a hang)."""

from __future__ import annotations

import json
import logging

import pytest

from core.jsonl import read_jsonl
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
