"""The one wrapper between TRL and a reward function (`Reward`), and what it checks on every call: one number
(or None) per completion, finite, in time.

A call from TRL goes `Reward` -> the task's (or the user's) reward function -> its grading. The wrapper carries
all TRL needs beside the function: the component's key as `__name__`, the task's bound settings, the checks
below, the time limit, and on the stage's first reward the collapse guard's `completions/distinct_share`.

TRL 1.16 (`GRPOTrainer._calculate_rewards`) takes what a reward function returns, turns None into NaN
and sums the weighted rewards with `nansum`. Unchecked, a reward that returns None instead of a list,
or strings, fails there with a TypeError or ValueError that does not name it; one that returns inf
trains on nothing (every advantage NaN: loss 0, grad_norm 0, and the run ends "done"); one that
hangs hangs the run. `checked_rewards` sets every reward of a stage (built-in and the user's) so that:

- a result that is not a list (or tuple, or 1-d array) of one number or None per completion, or that
  holds a number that is not finite in float32 (inf; 1e39: TRL puts every score in a float32 tensor,
  `torch.tensor(..., dtype=torch.float32)`, where it becomes inf and trains on nothing as inf does),
  stops the stage with a `RewardError` naming the reward and the value (run.json records it);
- None or NaN for a completion is "no score" (TRL's contract: the other rewards decide it), but a
  batch in which a reward scores no completion at all is reported, once per stage and reward: a
  warning in the console and in the stage's run.json entry (`warnings`), and the user's rewards log
  the share they scored each step (`rewards/<name>/scored_share` in metrics.jsonl and wandb);
- a reward that changes its inputs in place (appends to `completions`, edits a message of one, rewrites a
  column: TRL passes the same lists to every reward of the step, so the rewards after it would score the
  changed ones) stops the stage with a `RewardError` naming the reward and the input (train/rewards/inputs.py);
- a call running longer than `reward.timeout_s` stops the stage with a `RewardError` naming the
  reward. A Python thread cannot be stopped: the stuck call is left in a daemon thread, which ends
  with the process. An `async def` reward is timed by asyncio, which can only stop it at an `await`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import numbers
import re
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from core.checks import exit_failure
from curriculum.tasks.base import completion_text
from train.rewards.inputs import changed_input, fingerprint

log = logging.getLogger(__name__)

DISTINCT_KEY = "completions/distinct_share"
_SPACE = re.compile(r"\s+")

FLOAT32_MAX = float(np.finfo(np.float32).max)


class RewardError(RuntimeError):
    """A reward function returned something that is not one finite number (or None) per completion, or hung."""


def scores(name: str, result, count: int) -> list[float | None]:
    """`result` of reward `name` as one float or None per completion; a RewardError naming the reward otherwise.

    >>> scores("r", [1, 0.5, None, float("nan")], 4)
    [1.0, 0.5, None, None]
    >>> scores("r", None, 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    train.rewards.checks.RewardError: reward r: returned None, not a list of one number (or None) per completion ...
    >>> scores("r", [1.0, float("inf")], 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    train.rewards.checks.RewardError: reward r: completion 1 scored inf, not finite in float32 (TRL's reward dtype: ...
    """
    if hasattr(result, "tolist") and getattr(result, "ndim", None) == 1:  # a numpy array or torch tensor
        result = result.tolist()
    if not isinstance(result, (list, tuple)):
        raise RewardError(f"reward {name}: returned {_shown(result)}, not a list of one number (or None) per "
                          f"completion ({count} completions)")
    if len(result) != count:
        raise RewardError(f"reward {name}: returned {len(result)} scores for {count} completions (one each)")
    out: list[float | None] = []
    for i, value in enumerate(result):
        if value is None:
            out.append(None)
        elif not isinstance(value, numbers.Real):
            raise RewardError(f"reward {name}: completion {i} scored {_shown(value)}, not a number (or None: no score)")
        elif _is_nan(value):
            out.append(None)
        elif not finite_in_float32(value):
            shown = f"{value:g}" if isinstance(value, float) else _shown(value)  # an int may be too large for :g
            raise RewardError(f"reward {name}: completion {i} scored {shown}, not finite in float32 (TRL's reward "
                              f"dtype: |score| <= {FLOAT32_MAX:.4g}); a reward must be finite (None: no score)")
        else:
            out.append(float(value))
    return out


def _is_nan(value: numbers.Real) -> bool:
    try:
        return math.isnan(value)
    except OverflowError:  # an int too large for a float: no NaN, refused below
        return False


def finite_in_float32(value: numbers.Real) -> bool:
    """Whether `value` stays finite cast to float32, the dtype TRL holds every reward in.

    >>> finite_in_float32(3.4e38), finite_in_float32(3.5e38), finite_in_float32(10 ** 400)
    (True, False, False)
    """
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond float64
        return False
    with np.errstate(over="ignore"):  # the overflow is the answer, not a warning
        return bool(np.isfinite(np.float32(as_float)))


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}" if value is not None else "None"


_COPY_FIRST = ("TRL passes the same inputs to every reward of the step, so the rewards after it would score the "
               "changed ones. Copy before editing (list(completions), copy.deepcopy(completions[i]))")


class Reward:
    """One reward function as TRL calls it, and the one wrapper between TRL and the function: TRL logs it by
    its `__name__` (`rewards/<name>/mean`), so it carries the component's key; `settings` are the keywords the
    task bound (a `functools.partial`'s, unpacked by `task_reward`), which win over same-named dataset columns.
    Each call runs within `timeout_s`, leaves its inputs as they were and has its result checked (`scores`).

    `warn(event)` records a batch it scored nothing of (once per stage: a wrapper lives for one stage).
    `log_share`: log `rewards/<name>/scored_share` each call (the user's rewards; the built-ins score all).
    `group_size` (the stage's first reward only, which sees the whole generation batch): log the batch's
    `completions/distinct_share`, the collapse guard's metric; TRL shows no callback the completions.
    `__call__` is the sync form; `AsyncReward` exposes `acall` as its `__call__`, which TRL awaits.

    >>> def scaled(completions, scale, **kwargs):
    ...     return [scale * len(c) for c in completions]
    >>> bound = task_reward("size", functools.partial(scaled, scale=2.0))
    >>> bound(completions=["ab", "c"], scale=[9, 9]), bound.__name__
    ([4.0, 2.0], 'size')
    """

    def __init__(self, name: str, func: Callable, settings: Mapping | None = None, *, log_share: bool = False):
        self.__name__, self.func, self.settings, self.log_share = name, func, dict(settings or {}), log_share
        self.__doc__ = getattr(func, "__doc__", None)
        self.timeout_s: float | None = None
        self.warn: Callable[[dict], None] | None = None
        self.group_size: int | None = None
        self.beside: tuple[str, ...] = ()  # the stage's other async rewards, which TRL awaits beside this one
        self.warned = self.split_warned = False

    def __call__(self, completions, **kwargs) -> list[float | None]:
        kwargs["completions"] = completions  # TRL passes every input by keyword; a direct call may pass this first
        self.log_distinct(kwargs)
        before = fingerprint(kwargs)
        try:
            result = _call_in_time(self.func, {**kwargs, **self.settings}, self.timeout_s, self.__name__)
        except SystemExit as err:
            raise exit_failure(f"reward {self.__name__}", err) from err
        return self.check(result, kwargs, before)

    async def acall(self, completions, **kwargs) -> list[float | None]:
        """The same for an `async def` reward, timed by asyncio (which can stop it only at an `await`)."""
        kwargs["completions"] = completions
        self.log_distinct(kwargs)
        before = fingerprint(kwargs)
        try:
            result = await asyncio.wait_for(self.func(**{**kwargs, **self.settings}), self.timeout_s)
        except asyncio.TimeoutError:
            raise RewardError(_timeout_message(self.__name__, self.timeout_s)) from None
        except SystemExit as err:
            raise exit_failure(f"reward {self.__name__}", err) from err
        return self.check(result, kwargs, before)

    def log_distinct(self, kwargs: dict) -> None:
        log_metric, completions = kwargs.get("log_metric"), kwargs.get("completions")
        if self.group_size is None or log_metric is None or completions is None:
            return
        if len(completions) % self.group_size:
            # Groups split across processes (multi-GPU): a metric must never stop training; say so once.
            if not self.split_warned:
                log.warning("distinct share not logged: %d completions are not whole groups of %d",
                            len(completions), self.group_size)
                self.split_warned = True
            return
        log_metric(DISTINCT_KEY, distinct_share(completions, self.group_size))

    def check(self, result, kwargs: dict, before: dict) -> list[float | None]:
        changed = changed_input(before, kwargs)
        if changed is not None:  # before its length is checked: the changed input's count is not the batch's
            raise RewardError(self.changed_message(changed))
        out = scores(self.__name__, result, len(kwargs["completions"]))
        scored = sum(value is not None for value in out) / max(len(out), 1)
        if self.log_share and kwargs.get("log_metric") is not None:
            kwargs["log_metric"](f"rewards/{self.__name__}/scored_share", scored)
        if scored == 0 and not self.warned:
            self.warned = True
            state = kwargs.get("trainer_state")
            # the step this batch trains (the trainer's count is of steps done)
            event = {"reward": self.__name__, "stage_step": (getattr(state, "global_step", None) or 0) + 1,
                     "warning": f"scored none of the batch's {len(out)} completions (all None or NaN); it adds "
                                "nothing to their advantages"}
            log.warning("reward %s: %s (said once per stage)", self.__name__, event["warning"])
            if self.warn is not None:
                self.warn(event)
        return out

    def changed_message(self, changed: str) -> str:
        if not self.beside:
            return f"reward {self.__name__}: changed its input {changed} in place; {_COPY_FIRST}"
        return (f"reward {self.__name__}: its input {changed} was changed in place while it ran, by it or by an async "
                f"reward TRL awaited beside it ({', '.join(self.beside)}); {_COPY_FIRST}")

    def __repr__(self) -> str:
        return f"Reward({self.__name__}, {self.func!r}, {sorted(self.settings)}, timeout_s={self.timeout_s})"


class AsyncReward(Reward):
    """A `Reward` around an `async def` function: TRL tells an async reward by its type's `__call__`."""

    __call__ = Reward.acall  # type: ignore[assignment]  # TRL awaits the async rewards of a step together


def reward(name: str, func: Callable, settings: Mapping | None = None, *, log_share: bool = False) -> Reward:
    """`func` as a `Reward` named `name`, awaitable when `func` is (TRL awaits those)."""
    from trl.trainer.utils import is_async_callable

    return (AsyncReward if is_async_callable(func) else Reward)(name, func, settings, log_share=log_share)


def task_reward(name: str, func: Callable) -> Reward:
    """A task's reward function as a `Reward`: a `functools.partial` is unpacked, its keywords the bound settings
    (a task binds its settings so; a partial of a module-level function pickles, unlike a closure)."""
    if isinstance(func, functools.partial) and not func.args:
        return reward(name, func.func, func.keywords)
    return reward(name, func)


def checked_rewards(funcs: Sequence[Callable], *, timeout_s: float | None, warn: Callable[[dict], None] | None = None,
                    group_size: int | None = None) -> list[Reward]:
    """Every reward function of a stage as a `Reward` of its own (the run's are built once, by `reward_stack`; a
    wrapper holds one stage's state: its warning sink, what it warned of, its group size) with the stage's time
    limit and warning sink; the first also logs the distinct share of groups of `group_size` (once per batch, not
    per function)."""
    wrapped = [reward(f.__name__, f.func, f.settings, log_share=f.log_share) if isinstance(f, Reward)
               else reward(f.__name__, f) for f in funcs]
    for func in wrapped:
        func.timeout_s, func.warn = timeout_s, warn
    if wrapped:
        wrapped[0].group_size = group_size
    awaited = [w for w in wrapped if isinstance(w, AsyncReward)]
    for func in awaited:
        func.beside = tuple(other.__name__ for other in awaited if other is not func)
    return wrapped


def distinct_share(completions: Sequence, group_size: int) -> float:
    """Mean over groups (consecutive runs of `group_size` completions of one prompt) of distinct/size.

    Whitespace differences do not count as distinct.

    >>> distinct_share(["a", "a ", "b", "c"], 2)  # group 1: one distinct of two; group 2: two of two
    0.75
    >>> distinct_share([[{"role": "assistant", "content": "x"}]] * 4, 4)
    0.25
    """
    if group_size < 1 or len(completions) % group_size:
        raise ValueError(f"distinct_share: {len(completions)} completions do not split into groups of {group_size}")
    texts = [_SPACE.sub(" ", completion_text(c)).strip() for c in completions]
    groups = [texts[i:i + group_size] for i in range(0, len(texts), group_size)]
    return sum(len(set(group)) / group_size for group in groups) / len(groups)


def _call_in_time(func: Callable, kwargs: dict, timeout_s: float | None, name: str):
    """`func(**kwargs)`, in a daemon thread when there is a time limit; an error raised in it is raised here."""
    if timeout_s is None:
        return func(**kwargs)
    outcome: dict = {}

    def call():
        try:
            outcome["result"] = func(**kwargs)
        except BaseException as err:  # handed to the trainer's thread below
            outcome["error"] = err

    worker = threading.Thread(target=call, name=f"reward {name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RewardError(_timeout_message(name, timeout_s))
    if "error" in outcome:
        outcome["error"].add_note(f"(raised by reward {name})")
        raise outcome["error"]
    return outcome["result"]


def _timeout_message(name: str, timeout_s: float) -> str:
    return (f"reward {name}: no result after {timeout_s:g} s (reward.timeout_s); the stage stops here. Make the "
            "reward faster, or raise reward.timeout_s (null: no limit)")
