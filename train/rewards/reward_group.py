"""A run's rewards: the task's reward functions at `reward.weights`, and the user's own beside them.

The task offers its components (`Task.reward_functions`, built with the run's prompt format, completion
length and the reward group's blocks for it) and its presets (`Task.reward_presets`); the reward group
(conf/reward/*.yaml) names the task whose components it weighs (`reward.task`), a preset of the task's
to start from (`reward.preset`) and the weights. `reward.custom` adds functions from the user's modules
(`train/rewards/custom.py`), weight 1 unless given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from core.checks import ConfigError, plain
from curriculum.tasks.base import Task
from curriculum.tasks.contract import check_reward_functions
from curriculum.tasks.rewards import RewardSettings, weighted_rewards
from train.rewards.checks import check_timeout
from train.rewards.custom import load_custom_reward

#: The reward group's keys every task's run reads; the others are the task's own blocks (K&K: overlong, tiered).
REWARD_KEYS = ("task", "preset", "weights", "allow_negative_weights", "custom", "timeout_s")


def task_reward_funcs(reward_cfg, task: Task, *, fmt: str,
                      max_completion_length: int) -> tuple[list[Callable], list[float]]:
    """The reward group's (functions, weights) for `task`, for GRPOTrainer's `reward_funcs` and `reward_weights`.

    Components at weight 0 are left out but for the task's `always_rewarded` (their means are logged); a
    negative weight needs `reward.allow_negative_weights`. ConfigError names the bad key.

    >>> from curriculum.tasks import build_task
    >>> funcs, weights = task_reward_funcs({"task": "gsm8k", "weights": {"correctness": 2.0, "integer": 0.5}},
    ...                                    build_task({"name": "gsm8k", "source": "sample"}), fmt="reasoning_answer",
    ...                                    max_completion_length=200)
    >>> [f.__name__ for f in funcs], weights
    (['correctness_reward', 'integer_reward'], [2.0, 0.5])
    """
    cfg = plain(reward_cfg)
    check_timeout(cfg.get("timeout_s"))
    _check_task(cfg.get("task"), task)
    options = {name: block for name, block in cfg.items() if name not in REWARD_KEYS}
    functions = check_reward_functions(task, task.reward_functions(RewardSettings(fmt, max_completion_length, options)))
    weights = {**_preset(cfg.get("preset"), task), **(cfg.get("weights") or {})}
    for name, spec in (cfg.get("custom") or {}).items():
        functions[str(name)] = load_custom_reward(str(name), spec, reserved=tuple(functions), columns=task.columns)
        weights.setdefault(str(name), 1.0)
    return weighted_rewards(functions, weights, always=task.always_rewarded,
                            allow_negative=cfg.get("allow_negative_weights") is True)


def _check_task(named, task: Task) -> None:
    """`reward.task` (null: any task) names the task whose components the weights weigh."""
    if named is not None and named != task.name:
        presets = ", ".join(task.reward_presets()) or "none"
        raise ConfigError(f"reward.task: these weights are {named}'s components, but the task is {task.name}; "
                          f"choose a reward of {task.name}'s: a conf/reward/ file whose task is {task.name}, or "
                          f"reward=preset [reward.preset=<one of its presets: {presets}>]")


def _preset(name, task: Task) -> Mapping[str, float]:
    """The weights of the task's preset `name` (None: none, the weights alone)."""
    if name is None:
        return {}
    presets = task.reward_presets()
    if name not in presets:
        raise ConfigError(f"reward.preset: {name!r} is not a preset of task {task.name}; its presets: "
                          f"{', '.join(presets) or 'none (give reward.weights)'}")
    return presets[name]
