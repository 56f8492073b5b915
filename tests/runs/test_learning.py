"""GRPO stages learn from their reward, and the handoff carries what was learned.

The tiny model is trained on a probe reward (the share of low token ids, ~0.5 at random init,
with spread inside every group) and nothing else: no entropy bonus, every K&K component at
weight 0. If the reward -> advantage -> gradient path is wired right the share rises; with the
sign flipped it falls. Margins: with 4 completions x 16 tokens a step's mean share has a standard
deviation of about 0.06 at start, 0.03 over a 5-step average, so a 0.25 rise is ~8 deviations.
"""

from __future__ import annotations

import json
import statistics

import pytest

from core.rundir.files import read_jsonl
from tests.conftest import compose_cfg, run_cli
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

PROBE = "rewards/low_tokens/mean"
TWO_STAGES = "curriculum.stages=[{name: a, ppl: 2, steps: 20, pool: 16}, {name: b, ppl: 3, steps: 5, pool: 16}]"
PROBE_ONLY = ("limits.max_steps=null", "grpo.learning_rate=1e-2", "grpo.save_steps=100", "reward.weights.format=0",
              "reward.weights.answer=0", "reward.weights.overlong=0", "eval.subsets=[2]", "eval.n=2")


def _steps(run_dir, stage: int) -> list[dict]:
    return [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step" and r["stage"] == stage]


def _mean(rows: list[dict], key: str = PROBE) -> float:
    return statistics.fmean(r[key] for r in rows)


@pytest.fixture(scope="module")
def probe_runs(tmp_path_factory, cache_dir):
    """Two two-stage runs on the probe reward: as configured, and with its weight negated (reference=base)."""
    runs = {}
    for name, extra in (("learn", ()), ("unlearn", ("reward.allow_negative_weights=true",
                                                     "+reward.weights.low_tokens=-1", "reference=base"))):
        cfg = compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke", TWO_STAGES, *PROBE_ONLY, *extra)
        assert not cfg.grpo.get("entropy_coef"), "learning must come from the reward alone"
        run_dir = tmp_path_factory.mktemp(name)
        run_curriculum(read_settings(cfg), run_dir)
        runs[name] = run_dir
    return runs


def test_a_stage_learns_from_its_reward(probe_runs):
    stage = _steps(probe_runs["learn"], 1)
    assert len(stage) == 20
    start, end = _mean(stage[:5]), _mean(stage[-5:])
    assert end > start + 0.25, f"probe reward {start:.2f} -> {end:.2f}: the stage did not learn"
    assert _mean(stage, "frac_reward_zero_std") < 1, "groups had reward variance (non-zero advantages)"
    assert all(r["learning_rate"] > 0 for r in stage), "every step updates the policy"


def test_the_next_stage_starts_where_the_previous_ended(probe_runs):
    first, second = _steps(probe_runs["learn"], 1), _steps(probe_runs["learn"], 2)
    assert abs(_mean(second[:3]) - _mean(first[-5:])) < 0.1
    assert _mean(second[:3]) > _mean(first[:5]) + 0.25, "the handoff carried what stage a learned"


def test_a_negated_reward_is_unlearned(probe_runs):
    """The same run with the probe's weight at -1 drives the share down: the sign reaches the gradient."""
    unlearned, learned = _steps(probe_runs["unlearn"], 1), _steps(probe_runs["learn"], 1)
    assert _mean(unlearned[-5:]) < _mean(unlearned[:5]) - 0.1
    assert _mean(learned[-5:]) - _mean(unlearned[-5:]) > 0.4, "same start, same steps: only the sign differs"


def test_kl_is_zero_at_each_stage_start_against_the_previous_stage(probe_runs):
    for stage in (1, 2):
        assert _steps(probe_runs["learn"], stage)[0]["kl"] == pytest.approx(0.0, abs=1e-6)


def test_kl_is_positive_after_stage_one_against_the_base(probe_runs):
    assert _steps(probe_runs["unlearn"], 1)[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert _steps(probe_runs["unlearn"], 2)[0]["kl"] > 1e-3, "stage b starts away from the base it is held to"
    manifest = json.loads((probe_runs["unlearn"] / "run.json").read_text())
    assert manifest["reference"] == "base"
    assert {s["reference"] for s in manifest["stages"]} == {manifest["base_model"]}


USER_MODULE = '''
def share_below(completions, completion_ids, below, **kwargs):
    """A user's reward: the share of completion tokens with an id below `below`."""
    return [sum(t < below for t in ids) / max(1, len(ids)) for ids in completion_ids]
'''


def test_a_users_reward_module_by_import_path(tmp_path):
    """The CLI with a reward from the user's own module: logged under its name, and learned over 20 steps (the probe's
    rise in `probe_runs`' first stage, ~0.4 there)."""
    (tmp_path / "my_rewards.py").write_text(USER_MODULE)
    result = run_cli(
        "train", "+curriculum=kk_ladder", "experiment=smoke", f"paths.output_dir={tmp_path / 'out'}", "run_name=r",
        "curriculum.stages=[{name: a, ppl: 2, steps: 20, pool: 16}]", *PROBE_ONLY, "+reward.weights.low_tokens=0",
        "+reward.custom.mine={_target_: my_rewards.share_below, _partial_: true, below: 660}",
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stage = _steps(tmp_path / "out" / "runs" / "r", 1)
    assert len(stage) == 20 and all("rewards/mine/mean" in r for r in stage)
    assert _mean(stage[-5:], "rewards/mine/mean") > _mean(stage[:5], "rewards/mine/mean") + 0.25
