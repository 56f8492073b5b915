"""Training rollouts sampled into rollouts.jsonl: whole groups, each completion's reward per component, its
weighted reward and the advantage GRPO trained on (read from TRL's own record of the batch)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

import pytest

from train.tracking import due

# experiment=smoke's weights: reward=default (answer 2, format 0.5, overlong 0.5) and the probe (weight 1)
WEIGHTS = {"format": 0.5, "answer": 2.0, "overlong": 0.5, "low_tokens": 1.0}  # the smoke stack, by its keys


@pytest.fixture(scope="module")
def rollouts(smoke_ladder) -> list[dict]:
    run_dir, _ = smoke_ladder
    return [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]


@pytest.mark.run
def test_every_grpo_stage_is_sampled_at_its_first_and_last_step_in_whole_groups(rollouts):
    # rollouts.every 10 and 2-step smoke stages: steps 1 (first) and 2 (last). rollouts.groups is 2, but a
    # smoke step generates one group (4 completions of one prompt): all of it, and no more
    steps = defaultdict(list)
    for row in rollouts:
        steps[(row["stage"], row["stage_step"])].append(row)
    assert sorted(steps) == [(stage, step) for stage in range(1, 6) for step in (1, 2)]
    for rows in steps.values():
        assert [r["completion_index"] for r in rows] == [0, 1, 2, 3]
        assert len({r["prompt"] for r in rows}) == 1 and "knights and knaves" in rows[0]["prompt"]


@pytest.mark.run
def test_each_row_holds_its_components_their_weighted_sum_and_the_advantage_grpo_used(rollouts):
    by_group = defaultdict(list)
    for row in rollouts:
        assert set(row["rewards"]) == set(WEIGHTS) and isinstance(row["completion"], str)
        assert row["reward"] == pytest.approx(sum(WEIGHTS[k] * v for k, v in row["rewards"].items()))
        assert row["global_step"] == 2 * (row["stage"] - 1) + row["stage_step"]
        by_group[(row["stage"], row["stage_step"])].append(row)
    # GRPO's advantage (scale_rewards: group): (reward - group mean) / (group std + 1e-4), torch's unbiased std
    for group in by_group.values():
        rewards = [r["reward"] for r in group]
        mean, std = statistics.mean(rewards), statistics.stdev(rewards)
        assert [r["advantage"] for r in group] == pytest.approx([(x - mean) / (std + 1e-4) for x in rewards],
                                                                abs=1e-4)


@pytest.mark.parametrize(("step", "max_steps", "every", "sampled"), [
    (1, 200, 10, True),  # a stage's first step: what it starts from
    (10, 200, 10, True),  # every 10th
    (11, 200, 10, False),
    (200, 200, 10, True),  # its last: what it hands on
    (7, 7, 10, True),  # the last of a stage shorter than `every`
    (1, 200, 0, False),  # every 0: never
])
def test_due(step, max_steps, every, sampled):
    assert due(step, max_steps, every) is sampled
