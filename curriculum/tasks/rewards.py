"""What every task's rewards share: the settings a run builds them with, and their weights.

A task offers its reward functions by component name (`Task.reward_functions(settings)`), TRL's
form: pure, batched, ``f(completions, **columns) -> list[float]``. A run weighs them with
`reward.weights` (a preset of the task's, or the user's) through `weighted_rewards`, which TRL
then gets as `reward_funcs` and `reward_weights`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.checks import ConfigError, is_number

RewardFunc = Callable[..., list[float]]


@dataclass(frozen=True)
class RewardSettings:
    """What a task's reward functions are built with, from a run's config."""

    fmt: str  # `prompt.fmt`: the answer format the prompt asks for (the grader reads it)
    max_completion_length: int  # `grpo.max_completion_length`: a length-aware reward's limit
    options: Mapping[str, Any] = field(default_factory=dict)  # the reward group's blocks for the task (K&K: overlong)


class BoundReward:
    """A reward function with settings bound, keeping the function's `__name__` for TRL's logs.

    Bound settings win over same-named dataset columns; module-level and picklable, unlike a closure
    (a multiprocessing launcher pickles the rewards).

    >>> def scaled(completions, scale, **kwargs):
    ...     return [scale * len(c) for c in completions]
    >>> bound = BoundReward(scaled, scale=2.0)
    >>> bound(["ab", "c"], scale=[9, 9]), bound.__name__
    ([4.0, 2.0], 'scaled')
    """

    def __init__(self, func: RewardFunc, **settings):
        self.func, self.settings = func, settings
        self.__name__, self.__doc__ = func.__name__, func.__doc__

    def __call__(self, completions, **kwargs) -> list[float]:
        return self.func(completions, **{**kwargs, **self.settings})

    def __repr__(self) -> str:
        return f"BoundReward({self.__name__}, {sorted(self.settings)})"


def weighted_rewards(functions: Mapping[str, RewardFunc], weights: Mapping, *, always: tuple[str, ...] = (),
                     allow_negative: bool = False, key: str = "reward.weights") -> tuple[list[RewardFunc], list[float]]:
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
