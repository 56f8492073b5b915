"""What every task's rewards share: the settings a run builds them with, and their weights.

A task offers its reward functions by component name (`Task.reward_functions(settings)`), TRL's
form: pure, batched, ``f(completions, **columns) -> list[float]``; a task binds its own settings with
`functools.partial` (of a module-level function: it pickles, unlike a closure), and the run's wrapper
(`train.rewards.checks.Reward`) passes them over same-named dataset columns. A run weighs them with
`reward.weights` (a conf/reward/ file's or the command line's, over the task's `default_weights`) through
`weighted_rewards`, which TRL then gets as `reward_funcs` and `reward_weights`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from core.checks import ConfigError, is_number

RewardFunc = Callable[..., list[float]]
F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class RewardSettings:
    """What a task's reward functions are built with, from a run's config."""

    fmt: str  # `prompt.fmt`: the answer format the prompt asks for (the grader reads it)
    max_completion_length: int  # `grpo.max_completion_length`: a length-aware reward's limit
    options: Mapping[str, Any] = field(default_factory=dict)  # the reward group's blocks for the task (K&K: overlong)


def weighted_rewards(functions: Mapping[str, F], weights: Mapping, *, always: tuple[str, ...] = (),
                     allow_negative: bool = False, key: str = "reward.weights") -> tuple[list[F], list[float]]:
    """The functions with a non-zero weight (and those in `always`, at their weight, 0 or not) with their
    weights, in `functions`' order: TRL's `reward_funcs` and `reward_weights`.

    Every weight must name a component and be a finite number; a missing weight is 0. A negative weight
    rewards the opposite of its component, so it needs `allow_negative`. At least one weight must be
    non-zero (else every advantage is 0). ConfigError names the bad key.

    >>> funcs, w = weighted_rewards({"a": len, "b": abs, "c": min}, {"b": 0.5}, always=("c",))
    >>> [f.__name__ for f in funcs], w
    (['abs', 'min'], [0.5, 0.0])
    >>> weighted_rewards({"a": len}, {"c": 1})
    Traceback (most recent call last):
    core.checks.ConfigError: reward.weights.c: unknown component; known: a
    """
    for name, value in weights.items():
        if name not in functions:
            raise ConfigError(f"{key}.{name}: unknown component; known: {', '.join(functions)}")
        if not is_number(value, finite=True):
            raise ConfigError(f"{key}.{name}: {value!r} is not a finite number")
        if value < 0 and not allow_negative:
            raise ConfigError(f"{key}.{name}: {value} is negative, which rewards the opposite of the component; "
                              "set reward.allow_negative_weights=true if that is what you want")
    kept = [(functions[name], float(weights.get(name, 0))) for name in functions
            if weights.get(name, 0) or name in always]
    if not any(weight for _, weight in kept):
        raise ConfigError(f"{key}: every weight is 0, so every advantage would be 0")
    return [f for f, _ in kept], [w for _, w in kept]
