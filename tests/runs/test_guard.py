"""The collapse guard on crafted metric streams: the distinct-share metric, the window logic, the callback."""

from __future__ import annotations

import asyncio

import pytest
from transformers import TrainerControl, TrainerState
from trl.trainer.utils import is_async_callable

from core.rundir.files import JsonlWriter, read_jsonl
from core.tracker import NullTracker
from curriculum.plan import Guard, Stage
from train.rewards.checks import DISTINCT_KEY, checked_rewards, distinct_share
from train.run.resume import logged_before_resume
from train.run.stage_end import CollapseGuard, CollapseWatch

LENGTH, ZERO_STD = "completions/mean_length", "frac_reward_zero_std"


@pytest.mark.parametrize(("completions", "group_size", "expected"), [
    (["a", "b", "c", "d"], 4, 1.0),  # every rollout different
    (["a", "a", "a", "a"], 4, 0.25),  # one completion four times: the collapse
    (["a b", "a  b\n", "c", "c"], 2, 0.5),  # whitespace alone does not make a completion distinct
    (["x", "y", "x", "x"], 2, 0.75),  # groups are consecutive: (x, y) 1.0 and (x, x) 0.5
    ([[{"role": "assistant", "content": "k"}], [{"role": "assistant", "content": "n"}]], 2, 1.0),  # chat
])
def test_distinct_share(completions, group_size, expected):
    assert distinct_share(completions, group_size) == expected


def test_distinct_share_refuses_a_batch_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        distinct_share(["a"] * 6, 4)


def test_only_the_first_reward_function_logs_the_share():
    logged = []

    def first(completions, **kwargs):
        return [0.0] * len(completions)

    def second(completions, **kwargs):
        return [1.0] * len(completions)

    funcs = checked_rewards([first, second], timeout_s=None, group_size=2)
    for func in funcs:
        func(completions=["a", "a"], log_metric=lambda name, value: logged.append((name, value)))
    assert [f.__name__ for f in funcs] == ["first", "second"]
    assert logged == [(DISTINCT_KEY, 0.5)]


def test_a_batch_of_split_groups_logs_nothing_and_still_scores(caplog):
    logged = []

    def score(completions, **kwargs):
        return [1.0] * len(completions)

    (wrapped,) = checked_rewards([score], timeout_s=None, group_size=4)
    for _ in range(2):
        assert wrapped(completions=["a"] * 6, log_metric=lambda name, value: logged.append(value)) == [1.0] * 6
    assert logged == [] and caplog.text.count("not whole groups of 4") == 1


def test_an_async_first_reward_stays_awaitable():
    logged = []

    async def first(completions, **kwargs):
        return [0.5] * len(completions)

    (wrapped,) = checked_rewards([first], timeout_s=None, group_size=2)
    assert is_async_callable(wrapped), "TRL must still await it with the other async rewards"
    rewards = asyncio.run(wrapped(completions=["a", "b"], log_metric=lambda name, value: logged.append(value)))
    assert rewards == [0.5, 0.5] and logged == [1.0]


def _events(guard: Guard, stream: list[dict]) -> list[tuple[int, str]]:
    watch = CollapseWatch(guard)
    return [(step, e["signal"]) for step, row in enumerate(stream, start=1) for e in watch.observe(row)]


GUARD = Guard(length_drop=0.5, zero_std=0.9, distinct_below=0.2, window=2, action="warn")


@pytest.mark.parametrize(("stream", "expected"), [
    # lengths 100, 100, 40, 40: window means 100, 70, 40 -> a 60% drop from the best, at step 4
    ([{LENGTH: 100}, {LENGTH: 100}, {LENGTH: 40}, {LENGTH: 40}], [(4, "length_drop")]),
    # a drop of less than half never triggers
    ([{LENGTH: 100}, {LENGTH: 100}, {LENGTH: 60}, {LENGTH: 60}], []),
    # a length that grows first: the drop is measured from the best window, not the first
    ([{LENGTH: 50}, {LENGTH: 50}, {LENGTH: 200}, {LENGTH: 200}, {LENGTH: 80}, {LENGTH: 80}], [(6, "length_drop")]),
    # one step's dip is averaged away by the window
    ([{LENGTH: 100}, {LENGTH: 100}, {LENGTH: 10}, {LENGTH: 100}], []),
    # zero-variance groups at the threshold count (>=), once, until the signal clears
    ([{ZERO_STD: 0.9}, {ZERO_STD: 0.9}, {ZERO_STD: 1.0}, {ZERO_STD: 0.0}, {ZERO_STD: 0.0},
      {ZERO_STD: 1.0}, {ZERO_STD: 1.0}], [(2, "zero_std"), (7, "zero_std")]),
    # distinct share below the floor, judged only once a full window is in
    ([{DISTINCT_KEY: 0.1}, {DISTINCT_KEY: 0.1}], [(2, "distinct_below")]),
    ([{DISTINCT_KEY: 0.1}], []),
    # rows without the key (summary lines, other metrics) leave the window as it was
    ([{LENGTH: 100}, {"loss": 1.0}, {LENGTH: 100}, {LENGTH: 20}, {LENGTH: 20}], [(5, "length_drop")]),
])
def test_window_logic_on_crafted_streams(stream, expected):
    assert _events(GUARD, stream) == expected


def test_a_switched_off_signal_is_not_watched():
    guard = Guard(length_drop=None, zero_std=0.5, distinct_below=None, window=1, action="warn")
    assert _events(guard, [{LENGTH: 100}, {LENGTH: 1, DISTINCT_KEY: 0.0, ZERO_STD: 0.6}]) == [(2, "zero_std")]


def test_a_resumed_stage_carries_its_window_over(tmp_path):
    """Steps 1-2 were logged before a kill; the resume continues after the checkpoint at step 2."""
    run_dir, stage = tmp_path, Stage(1, "a", "grpo", {"2ppl": 1.0}, steps=9, pool=8)
    checkpoint = run_dir / "stages" / "1-a" / "trainer" / "checkpoint-2"
    writer = JsonlWriter(run_dir / "metrics.jsonl", key=("stage", "stage_step", "kind"))
    # step 3 was logged too, but after the checkpoint: the resumed run logs it again
    writer.write([{"stage": 1, "stage_step": k, "kind": "step", LENGTH: 100.0} for k in (1, 2, 3)]
                 + [{"stage": 2, "stage_step": 1, "kind": "step", LENGTH: 5.0}])
    history = logged_before_resume(run_dir, stage, checkpoint)
    assert [(r["stage"], r["stage_step"]) for r in history] == [(1, 1), (1, 2)]
    recorded = []
    guard = CollapseGuard(Guard(0.5, None, None, 2, "warn"), writer, NullTracker(), recorded.append,
                          stage_index=1, stage_name="a", step_offset=0, history=history)
    state = TrainerState(global_step=3)
    guard.on_log(None, state, TrainerControl(), logs={LENGTH: 10.0})
    assert recorded == [], "window (100, 10): a 45% drop from the best window of 100"
    state.global_step = 4
    guard.on_log(None, state, TrainerControl(), logs={LENGTH: 10.0})
    assert [(e["stage_step"], e["value"]) for e in recorded] == [(4, 0.9)]


@pytest.mark.parametrize("action", ["warn", "stop"])
def test_callback_logs_records_and_stops_only_when_asked(tmp_path, caplog, action):
    writer = JsonlWriter(tmp_path / "metrics.jsonl", key=("stage", "stage_step", "kind"))
    recorded = []
    guard = CollapseGuard(Guard(0.5, None, None, 1, action), writer, NullTracker(), recorded.append,
                          stage_index=2, stage_name="3ppl", step_offset=10)
    state, control = TrainerState(), TrainerControl()
    for step, length in enumerate([100.0, 90.0, 30.0], start=1):
        state.global_step = step
        guard.on_log(None, state, control, logs={LENGTH: length})
    guard.on_log(None, state, control, logs={"train_runtime": 1.0, LENGTH: 0.0})  # the summary is not a step
    assert [(e["stage_step"], e["global_step"], e["signal"], e["value"]) for e in recorded] == [
        (3, 13, "length_drop", 0.7)]
    assert [r["kind"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == ["guard:length_drop"]
    assert "collapse guard: stage 3ppl step 3: length_drop = 0.700" in caplog.text
    assert control.should_training_stop is (action == "stop")
    assert (guard.stopped is not None) is (action == "stop")
