"""A run's rewards: the task's reward functions at `reward.weights`, and the user's own beside them.

The task offers its components (`Task.reward_functions`, built with the run's prompt format, completion
length and the reward group's blocks for it) and may declare default weights (`Task.default_weights`); the
reward group (conf/reward/*.yaml: the named rewards, each a file) names the task whose components it weighs
(`reward.task`) and the weights, which win over the task's defaults. `reward.custom` adds functions from the
user's modules (`train/rewards/custom.py`), weight 1 unless given.

Every component reaches TRL under its config key (`reward_stack` makes each a `train.rewards.checks.Reward` named
by it), so the one name of a
component is its key: in `reward.weights`, in TRL's logs (`rewards/<key>/mean`), wandb, run.json and the report.
`reward_stack` also records where each weight came from; run.json keeps that record (`reward_stack`), and the
console, the wandb config and the report read it there instead of reading the config again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TypeVar

from omegaconf import OmegaConf

from conf import CONF_DIR
from core.checks import ConfigError, is_number, plain
from curriculum.tasks import check_reward_functions
from curriculum.tasks.base import RewardSettings, Task
from train.rewards.checks import Reward, task_reward
from train.rewards.custom import load_custom_reward

#: The reward group's keys every task's run reads; the others are the task's own blocks (K&K: overlong, tiered).
REWARD_KEYS = ("task", "weights", "allow_negative_weights", "custom", "timeout_s")
F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class RewardComponent:
    """One reward function as the run weighs it: its config key (TRL's name for it), weight and where the weight
    came from: `task default` (`Task.default_weights`), `reward.weights` (a reward file or the command line),
    `reward.custom` (a custom reward's default 1), or `logged` (a task's `always_rewarded` at weight 0)."""

    name: str
    weight: float
    source: str


def reward_stack(reward_cfg, task: Task, *, fmt: str,
                 max_completion_length: int) -> tuple[list[Reward], list[RewardComponent]]:
    """The reward group's functions for `task`, each named by its key, and the components TRL weighs them as:
    GRPOTrainer's `reward_funcs`, and each one's `reward_weights` entry with where it came from.

    Components at weight 0 are left out but for the task's `always_rewarded` (their means are logged); a
    negative weight needs `reward.allow_negative_weights`. ConfigError names the bad key.

    >>> from curriculum.tasks import build_task
    >>> gsm8k = build_task({"name": "gsm8k", "source": "sample"})
    >>> funcs, stack = reward_stack({"task": "gsm8k", "weights": {"correctness": 1.0, "integer": 0.5},
    ...                              "custom": {"short": {"_target_": "train.rewards.probe.low_token_share",
    ...                                                   "_partial_": True, "below": 600}}}, gsm8k,
    ...                             fmt="reasoning_answer", max_completion_length=200)
    >>> [f.__name__ for f in funcs]
    ['correctness', 'integer', 'short']
    >>> [(c.name, c.weight, c.source) for c in stack]  # doctest: +NORMALIZE_WHITESPACE
    [('correctness', 1.0, 'reward.weights'), ('integer', 0.5, 'reward.weights'), ('short', 1.0, 'reward.custom')]
    """
    cfg = plain(reward_cfg)
    _check_task(cfg.get("task"), task)
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


def stack_record(stack: list[RewardComponent]) -> list[dict]:
    """The components as run.json records them (`reward_stack`): one {name, weight, source} each, in TRL's order."""
    return [asdict(component) for component in stack]


def _check_task(named, task: Task) -> None:
    """`reward.task` (null: any task) names the task whose components the weights weigh."""
    if named is not None and named != task.name:
        raise ConfigError(f"reward.task: these weights are {named}'s components, but the task is {task.name}; "
                          f"{_rewards_of(task)}")


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
