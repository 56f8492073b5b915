"""Promotion, replay and guard in the stage plan: parsed, checked (errors name the key), and kk_adaptive."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from conf.schema import RESUME_FREE_KEYS
from core.checks import ConfigError
from core.rundir.manifest import Manifest
from curriculum.plan import Guard, Promote, build_plan
from tests.pools import held_out_pools, stage_pool


def _stages(make_cfg, stages: str, *extra: str):
    return build_plan(make_cfg("+curriculum=kk_ladder", f"curriculum.stages={stages}", *extra))


def test_kk_adaptive_has_the_ladders_stages_and_budget(make_cfg):
    ladder = build_plan(make_cfg("+curriculum=kk_ladder"))
    adaptive = build_plan(make_cfg("+curriculum=kk_adaptive"))
    shape = [(s.name, s.level_weights, s.steps) for s in ladder]
    assert [(s.name, s.level_weights, s.steps) for s in adaptive] == shape
    assert [s.promote is not None for s in adaptive] == [True, True, True, True, False]
    assert adaptive[0].replay == {} and adaptive[1].pool_weights == {"2ppl": 0.2, "3ppl": 0.8}
    assert adaptive[4].pool_weights == {"2ppl": 0.05, "3ppl": 0.05, "4ppl": 0.05, "5ppl": 0.05, "6ppl": 0.8}
    assert all(s.guard == Guard(0.5, 0.9, 0.2, 5, "warn") for s in adaptive)


def test_promote_defaults_and_a_stage_guard_wins_over_the_curriculum_guard(make_cfg):
    plan = _stages(make_cfg, "[{name: a, ppl: 2, steps: 9, pool: 8, promote: {accuracy: 0}},"
                             " {name: b, ppl: 3, steps: 9, pool: 8, guard: {zero_std: 0.5, action: stop}}]",
                   "+curriculum.guard={length_drop: 0.3}")
    assert plan[0].promote == Promote(accuracy=0.0, every=10, min_steps=0)
    assert plan[0].guard == Guard(0.3, None, None, 20, "warn")
    assert plan[1].guard == Guard(None, 0.5, None, 20, "stop")


def test_replay_pool_holds_earlier_ppl_and_no_held_out_puzzle(make_cfg):
    cfg = make_cfg("+curriculum=kk_ladder", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 10},"
                   " {name: b, ppl: {3: 1, 4: 1}, steps: 1, pool: 20, replay: 0.5}]", "eval.n=5")
    stage = build_plan(cfg)[1]
    assert stage.pool_weights == {"2ppl": 0.5, "3ppl": 0.25, "4ppl": 0.25}
    held_out = held_out_pools(cfg, 2, 3, 4)
    records, _ = stage_pool(cfg, stage, held_out)
    counts = {ppl: sum(len(r.columns["names"]) == ppl for r in records) for ppl in (2, 3, 4)}
    assert counts == {2: 10, 3: 5, 4: 5}
    held_quizzes = {r.question for rows in held_out.values() for r in rows}
    assert not held_quizzes & {r.question for r in records}


@pytest.mark.parametrize(("stages", "key"), [
    # a threshold above 1 can never be reached
    ("[{name: a, ppl: 2, steps: 1, pool: 8, promote: {accuracy: 1.5}}]", "stages[0].promote.accuracy"),
    # accuracy is the one required promote key
    ("[{name: a, ppl: 2, steps: 1, pool: 8, promote: {every: 2}}]", "stages[0].promote.accuracy"),
    # a check every 0 steps is not a cadence
    ("[{name: a, ppl: 2, steps: 1, pool: 8, promote: {accuracy: 0.5, every: 0}}]", "stages[0].promote.every"),
    # a typo in promote must not be ignored
    ("[{name: a, ppl: 2, steps: 1, pool: 8, promote: {acuracy: 0.5}}]", "stages[0].promote.acuracy"),
    # the first stage has nothing to replay
    ("[{name: a, ppl: 2, steps: 1, pool: 8, replay: 0.2}]", "stages[0].replay"),
    # replaying the whole pool leaves no room for the stage's own level
    ("[{name: a, ppl: 2, steps: 1, pool: 8}, {name: b, ppl: 3, steps: 1, pool: 8, replay: 1}]", "stages[1].replay"),
    # an action the guard does not know
    ("[{name: a, ppl: 2, steps: 1, pool: 8, guard: {zero_std: 0.9, action: halt}}]", "stages[0].guard.action"),
    # a guard that watches nothing is a mistake, not a no-op
    ("[{name: a, ppl: 2, steps: 1, pool: 8, guard: {window: 3}}]", "stages[0].guard"),
    # a share outside 0..1
    ("[{name: a, ppl: 2, steps: 1, pool: 8, guard: {length_drop: -0.1}}]", "stages[0].guard.length_drop"),
    # SFT has no rollouts to validate by skill
    ("[{name: a, kind: sft, ppl: 2, steps: 1, pool: 8, promote: {accuracy: 0.5}}]", "stages[0].promote"),
])
def test_bad_adaptive_keys_are_named(make_cfg, stages, key):
    with pytest.raises(ConfigError, match="^" + re.escape(f"curriculum.{key}")):
        _stages(make_cfg, stages)


def test_run_json_records_the_pool_mix_with_replay(make_cfg, tmp_path):
    cfg = make_cfg("+curriculum=kk_adaptive")
    stages = Manifest.open(tmp_path, OmegaConf.to_container(cfg, resolve=True),
                           [stage.planned_record() for stage in build_plan(cfg)],
                           free_keys=RESUME_FREE_KEYS).data["stages"]
    assert (stages[1]["levels"], stages[1]["pool_levels"]) == ({"3ppl": 1.0}, {"2ppl": 0.2, "3ppl": 0.8})


def test_curriculum_guard_skips_sft_stages(make_cfg):
    plan = _stages(make_cfg, "[{name: s, kind: sft, ppl: 2, steps: 1, pool: 8}, {name: a, ppl: 2, steps: 1, pool: 8}]",
                   "+curriculum.guard={zero_std: 0.9}")
    assert plan[0].guard is None and plan[1].guard is not None
