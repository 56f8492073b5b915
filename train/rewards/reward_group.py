"""A run's rewards: the task's reward functions at `reward.weights` (over its `default_weights`), the user's own
beside them (`reward.custom`), and the probe reward the smoke runs learn from. Each reaches TRL as a
`train.rewards.checks.Reward` named by its config key, its one name in logs, run.json (`reward_stack`) and the report.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from conf import CONF_DIR
from core.checks import ConfigError, is_number, plain
from curriculum.tasks import check_reward_functions
from curriculum.tasks.base import RewardSettings, Task
from train.rewards.checks import Reward, reward, task_reward

#: The reward group's keys every task's run reads; the others are the task's own blocks (K&K: overlong, tiered).
REWARD_KEYS = ("task", "weights", "allow_negative_weights", "custom", "timeout_s")
F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class RewardComponent:
    """One reward function as the run weighs it: key, weight and `source` (`logged`: always_rewarded at 0)."""

    name: str
    weight: float
    source: str


def reward_stack(reward_cfg, task: Task, *, fmt: str,
                 max_completion_length: int) -> tuple[list[Reward], list[RewardComponent]]:
    """GRPOTrainer's `reward_funcs` for `task`, each named by its key, and their components (weights, sources);
    ConfigError names a bad key.

    >>> from curriculum.tasks import build_task
    >>> gsm8k = build_task({"name": "gsm8k", "source": "sample"})
    >>> funcs, stack = reward_stack({"task": "gsm8k", "weights": {"correctness": 1.0, "integer": 0.5},
    ...                              "custom": {"short": {"_target_": "train.rewards.reward_group.low_token_share",
    ...                                                   "_partial_": True, "below": 600}}}, gsm8k,
    ...                             fmt="reasoning_answer", max_completion_length=200)
    >>> [f.__name__ for f in funcs]
    ['correctness', 'integer', 'short']
    >>> [(c.name, c.weight, c.source) for c in stack]  # doctest: +NORMALIZE_WHITESPACE
    [('correctness', 1.0, 'reward.weights'), ('integer', 0.5, 'reward.weights'), ('short', 1.0, 'reward.custom')]
    """
    cfg = plain(reward_cfg)
    named = cfg.get("task")  # null: any task
    if named is not None and named != task.name:
        raise ConfigError(f"reward.task: these weights are {named}'s components, but the task is {task.name}; "
                          f"{_rewards_of(task)}")
    options = {name: block for name, block in cfg.items() if name not in REWARD_KEYS}
    offered = check_reward_functions(task, task.reward_functions(RewardSettings(fmt, max_completion_length, options)))
    functions = {name: task_reward(name, function) for name, function in offered.items()}
    defaults, given = dict(task.default_weights), cfg.get("weights") or {}
    if not defaults and not given:
        raise ConfigError(f"reward.weights: none given, and task {task.name} declares no default_weights; "
                          f"{_rewards_of(task)} (its components: {', '.join(offered)})")
    sources = dict.fromkeys(defaults, "task default") | dict.fromkeys(given, "reward.weights")
    weights = {**defaults, **given}
    for name, spec in (cfg.get("custom") or {}).items():
        functions[str(name)] = load_custom_reward(str(name), spec, reserved=tuple(functions), columns=task.columns)
        weights.setdefault(str(name), 1.0)
        sources.setdefault(str(name), "reward.custom")
    funcs, kept = weighted_rewards(functions, weights, always=task.always_rewarded,
                                   allow_negative=cfg.get("allow_negative_weights") is True)
    return funcs, [RewardComponent(f.__name__, weight, sources.get(f.__name__) if weight else "logged")
                   for f, weight in zip(funcs, kept, strict=True)]


def task_reward_funcs(reward_cfg, task: Task, *, fmt: str,
                      max_completion_length: int) -> tuple[list[Reward], list[float]]:
    """`reward_stack`'s functions and weights alone: GRPOTrainer's `reward_funcs` and `reward_weights`.

    >>> from curriculum.tasks import build_task
    >>> funcs, weights = task_reward_funcs({"task": "gsm8k", "weights": {"correctness": 2.0, "integer": 0.5}},
    ...                                    build_task({"name": "gsm8k", "source": "sample"}), fmt="reasoning_answer",
    ...                                    max_completion_length=200)
    >>> [f.__name__ for f in funcs], weights
    (['correctness', 'integer'], [2.0, 0.5])
    """
    funcs, stack = reward_stack(reward_cfg, task, fmt=fmt, max_completion_length=max_completion_length)
    return funcs, [component.weight for component in stack]


def _rewards_of(task: Task) -> str:
    """How to choose a reward of `task`'s: the conf/reward/ files that name it, or its default weights."""
    files = sorted(path.stem for path in (CONF_DIR / "reward").glob("*.yaml") if _task_of(path.stem) == task.name)
    if files:
        return f"choose a reward of {task.name}'s: reward={' | '.join(files)}"
    if task.default_weights:
        return f"reward=task runs {task.name}'s default_weights"
    return "give its weights: reward=task +reward.weights.<component>=<weight>"


def _task_of(reward_file: str) -> str | None:
    """The `task` a conf/reward/ file names, itself or through the file its defaults list starts from."""
    node = OmegaConf.load(CONF_DIR / "reward" / f"{reward_file}.yaml")
    if "task" in node:
        return node.task
    parents = [name for name in node.get("defaults", []) if name != "_self_"]
    return _task_of(parents[0]) if parents else None


def weighted_rewards(functions: Mapping[str, F], weights: Mapping, *, always: tuple[str, ...] = (),
                     allow_negative: bool = False, key: str = "reward.weights") -> tuple[list[F], list[float]]:
    """TRL's `reward_funcs` and `reward_weights`: the functions of a non-zero weight (and those in `always`), in
    `functions`' order; a missing weight is 0, a negative one needs `allow_negative`. ConfigError names a bad key.

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


# The keywords GRPOTrainer passes to every reward function, with the columns every row has (the task's come beside)
TRL_CALL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                     "id", "level")


def load_custom_reward(name: str, spec, reserved: tuple[str, ...], columns: tuple[str, ...] = ()) -> Reward:
    """The user's reward function of `reward.custom.<name>`, checked before any model loads: the import, each bound
    keyword a named parameter (one `**kwargs` would swallow is a typo), TRL's call binding. ConfigError names the key.

    >>> load_custom_reward("tokens", {"_target_": "train.rewards.reward_group.low_token_share", "below": 3},
    ...                    ()).__name__
    'tokens'
    >>> load_custom_reward("x", {"_target_": "no.such.module.fn"}, ())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    core.checks.ConfigError: reward.custom.x._target_: cannot import 'no.such.module.fn' ...
    """
    key = f"reward.custom.{name}"
    if name in reserved:
        raise ConfigError(f"{key}: {name!r} is a built-in component's name; choose another")
    if not isinstance(spec, Mapping) or not spec.get("_target_"):
        raise ConfigError(f"{key}: expected {{_target_: pkg.module.function, _partial_: true, <keyword>: value}}")
    if spec.get("_partial_") is False:
        raise ConfigError(f"{key}._partial_: must be true (the function is called by the trainer, not at load)")
    try:
        func = instantiate({**spec, "_partial_": True})
    except InstantiationException as err:
        raise ConfigError(f"{key}._target_: cannot import {spec['_target_']!r} ({_first_line(err)})") from None
    target = func.func if isinstance(func, functools.partial) else func
    if not callable(target):
        raise ConfigError(f"{key}._target_: {spec['_target_']!r} is not a function")
    named = {name for name, p in inspect.signature(target).parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for bound in getattr(func, "keywords", {}):
        if bound not in named:
            raise ConfigError(f"{key}.{bound}: not a parameter of {getattr(target, '__name__', target)!r} "
                              f"(it takes {', '.join(sorted(named))})")
    try:
        inspect.signature(func).bind(**dict.fromkeys((*TRL_CALL_KEYWORDS, *columns)))
    except TypeError as err:
        raise ConfigError(
            f"{key}: the function cannot be called as GRPOTrainer calls reward functions ({err}); accept "
            "`completions` and `**kwargs`, and bind its own settings in the config"
        ) from None
    return reward(name, func, log_share=True)  # the partial itself: TRL's keywords win over the bound ones


def _first_line(err: BaseException) -> str:
    text = str(err.__cause__ or err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def low_token_share(completions, completion_ids: Sequence[Sequence[int]], below: int, **kwargs) -> list[float]:
    """The probe reward: the share of each completion's tokens whose id is below `below` (0.0 for an empty one).
    A random-init model scores the same on a task's reward in every group (all advantages 0); this one varies from
    the first step, so it must rise if the policy gradient is wired right (`experiment=smoke`, the learning test).

    >>> low_token_share(["a", "b", ""], [[1, 700, 2, 900], [4], []], below=600)
    [0.5, 1.0, 0.0]
    """
    return [sum(t < below for t in toks) / len(toks) if toks else 0.0 for toks in completion_ids]
