"""Reward functions that break the way users' rewards break, for the reward drills
(tests/tasks/test_reward_checks.py)."""

from __future__ import annotations

import time


def returns_none(completions, **kwargs):
    return None  # forgot the return value's list


def returns_strings(completions, **kwargs):
    return ["1.0" for _ in completions]  # numbers as text


def returns_inf(completions, **kwargs):
    return [float("inf")] + [0.0] * (len(completions) - 1)  # a log of 0, a division by 0


def returns_beyond_float32(completions, **kwargs):
    return [1e39] + [0.0] * (len(completions) - 1)  # a finite Python float that TRL's float32 tensor makes inf


def returns_near_float32_max(completions, **kwargs):
    return [3e38] * len(completions)  # finite in float32 alone; two of them sum past it


def returns_nan(completions, **kwargs):
    return [float("nan")] * len(completions)  # scores nothing, every batch


def scores_half(completions, **kwargs):
    return [None if i % 2 else 1.0 for i in range(len(completions))]  # TRL's None: no score for that completion


def hangs(completions, **kwargs):
    time.sleep(3600)  # a remote judge that never answers
    return [0.0] * len(completions)


async def hangs_async(completions, **kwargs):
    import asyncio

    await asyncio.sleep(3600)
    return [0.0] * len(completions)


def exits_quietly(completions, **kwargs):
    raise SystemExit(0)  # a script's "done" pasted into a reward


def exits_with_code(completions, **kwargs):
    raise SystemExit(3)  # a judge's command-line entry point called as a function


def appends_to_completions(completions, **kwargs):
    completions.append("")  # a padding completion added to the list TRL hands every reward of the step
    return [0.0] * (len(completions) - 1)
