"""What a reward function returns, checked on every call: one number (or None) per completion, finite, in time.

TRL 1.16 (`GRPOTrainer._calculate_rewards`) takes what a reward function returns, turns None into NaN
and sums the weighted rewards with `nansum`. Unchecked, a reward that returns None instead of a list,
or strings, fails there with a TypeError or ValueError that does not name it; one that returns inf
trains on nothing (every advantage NaN: loss 0, grad_norm 0, and the run ends "done"); one that
hangs hangs the run. `checked_rewards` wraps every reward function of a stage (built-in and the
user's) so that:

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
import logging
import math
import numbers
import threading
from collections.abc import Callable, Sequence

import numpy as np

from core.checks import ConfigError, is_number
from core.user_code import call_user_code, exit_failure
from train.rewards.custom import NamedReward
from train.rewards.inputs import changed_input, fingerprint

log = logging.getLogger(__name__)

FLOAT32_MAX = float(np.finfo(np.float32).max)


class RewardError(RuntimeError):
    """A reward function returned something that is not one finite number (or None) per completion, or hung."""


def check_timeout(value, key: str = "reward.timeout_s") -> float | None:
    """`reward.timeout_s` as seconds (None: no limit); ConfigError unless a number > 0 or null.

    >>> check_timeout(600), check_timeout(None)
    (600.0, None)
    """
    if value is None:
        return None
    if not (is_number(value, finite=True) and value > 0):
        raise ConfigError(f"{key}: {value!r} is not a number of seconds > 0 (or null: no limit)")
    return float(value)


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


class CheckedReward:
    """A reward function, called within `timeout_s`, its inputs left as they were and its result checked
    (`scores`); TRL sees its name.

    `warn(event)` records a batch it scored nothing of (once per stage: a wrapper lives for one stage).
    `log_share`: log `rewards/<name>/scored_share` each call (the user's rewards; the built-ins score all).
    """

    def __init__(self, func: Callable, timeout_s: float | None, warn: Callable[[dict], None] | None = None,
                 log_share: bool = False):
        self.func, self.timeout_s, self.warn, self.log_share = func, timeout_s, warn, log_share
        self.__name__ = func.__name__
        self.warned = False

    def __call__(self, **kwargs) -> list[float | None]:
        who, before = f"reward {self.__name__}", fingerprint(kwargs)
        result = call_user_code(who, _call_in_time, self.func, kwargs, self.timeout_s, self.__name__)
        return self.check(result, kwargs, before)

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
        return f"reward {self.__name__}: changed its input {changed} in place; {_COPY_FIRST}"

    def __repr__(self) -> str:
        return f"CheckedReward({self.func!r}, timeout_s={self.timeout_s})"


class AsyncCheckedReward(CheckedReward):
    """The same for an `async def` reward: TRL awaits it with the others, so the wrapper stays awaitable.

    The async rewards of a step run together (`asyncio.gather`): an input changed while this one ran may have
    been changed by one of `beside` (the stage's other async rewards), and the error names them too.
    """

    beside: tuple[str, ...] = ()

    async def __call__(self, **kwargs) -> list[float | None]:  # type: ignore[override]  # TRL tells async rewards by this
        before = fingerprint(kwargs)
        try:
            result = await asyncio.wait_for(self.func(**kwargs), self.timeout_s)
        except asyncio.TimeoutError:
            raise RewardError(_timeout_message(self.__name__, self.timeout_s)) from None
        except SystemExit as err:
            raise exit_failure(f"reward {self.__name__}", err) from err
        return self.check(result, kwargs, before)

    def changed_message(self, changed: str) -> str:
        if not self.beside:
            return super().changed_message(changed)
        return (f"reward {self.__name__}: its input {changed} was changed in place while it ran, by it or by an async "
                f"reward TRL awaited beside it ({', '.join(self.beside)}); {_COPY_FIRST}")


def checked_rewards(funcs: Sequence[Callable], *, timeout_s: float | None,
                    warn: Callable[[dict], None] | None = None) -> list[CheckedReward]:
    """Every reward function of a stage wrapped (`CheckedReward`); the user's also log the share they score."""
    from trl.trainer.utils import is_async_callable

    wrapped = [(AsyncCheckedReward if is_async_callable(f) else CheckedReward)(
        f, timeout_s, warn, log_share=isinstance(f, NamedReward)) for f in funcs]
    awaited = [w for w in wrapped if isinstance(w, AsyncCheckedReward)]
    for reward in awaited:
        reward.beside = tuple(other.__name__ for other in awaited if other is not reward)
    return wrapped


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
