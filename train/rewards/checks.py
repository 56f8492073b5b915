"""The one wrapper TRL calls a reward through (`Reward`), and what it checks on every call.

TRL 1.16 turns None into NaN and sums the weighted rewards with `nansum` in float32: unchecked, a reward returning no
list fails there without naming itself, one returning inf (in float32) makes every advantage NaN while the run ends
"done", one that hangs hangs the run, one editing its inputs in place changes what the rewards after it score (TRL
passes the same lists to each). Each stops the stage with a `RewardError` naming the reward, as does a call past
`reward.timeout_s` (left in a daemon thread: a Python thread cannot be stopped; asyncio stops an async one only at an
`await`). None or NaN is "no score"; a batch scored none of is warned of once per stage.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import numbers
import re
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from core.checks import exit_failure
from curriculum.tasks.base import completion_text

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
        if value is None or (isinstance(value, numbers.Real) and value != value):  # NaN (an int too large is none)
            out.append(None)
        elif not isinstance(value, numbers.Real):
            raise RewardError(f"reward {name}: completion {i} scored {_shown(value)}, not a number (or None: no score)")
        elif not finite_in_float32(value):
            shown = f"{value:g}" if isinstance(value, float) else _shown(value)  # an int may be too large for :g
            raise RewardError(f"reward {name}: completion {i} scored {shown}, not finite in float32 (TRL's reward "
                              f"dtype: |score| <= {FLOAT32_MAX:.4g}); a reward must be finite (None: no score)")
        else:
            out.append(float(value))
    return out


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
    """One reward function as TRL calls it, logged by its `__name__`; `settings`: the keywords the task bound, which
    win over same-named dataset columns. `warn(event)` records a batch it scored nothing of; `log_share` logs
    `rewards/<name>/scored_share`; `group_size` (the first reward only, which sees the whole batch) logs the collapse
    guard's `completions/distinct_share`, as TRL shows no callback the completions.

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
        """The same for an `async def` reward, timed by asyncio."""
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
    """A task's reward function as a `Reward`, a `functools.partial`'s keywords its settings (a partial pickles)."""
    if isinstance(func, functools.partial) and not func.args:
        return reward(name, func.func, func.keywords)
    return reward(name, func)


def checked_rewards(funcs: Sequence[Callable], *, timeout_s: float | None, warn: Callable[[dict], None] | None = None,
                    group_size: int | None = None) -> list[Reward]:
    """A stage's reward functions, each a fresh `Reward` (it holds one stage's state) with the time limit and sink."""
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
    """Mean over groups of `group_size` consecutive completions of distinct/size, whitespace aside.

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


# Whether a reward changed its inputs: a hash per item before and after the call (TRL's handles are no data)
HANDLES = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})
_ATOMS = frozenset({str, bytes, int, float, bool, type(None)})  # hashed by value


def digest(value) -> int:
    """A hash of `value` by its contents: lists, tuples and dicts by their items, anything unhashable by its repr.

    >>> digest([1, "a", {"k": [2]}]) == digest([1, "a", {"k": [2]}]), digest([1, 2]) == digest([1, 3])
    (True, False)
    """
    kind = type(value)
    if kind in _ATOMS:
        return hash(value)
    if kind in (list, tuple):
        try:  # token ids, names: hashed in C, without a call per item
            return hash((kind, tuple(value)))
        except TypeError:  # an item is a list or a dict (a conversational completion's messages)
            return hash((kind, tuple(map(digest, value))))
    if kind is dict:
        return hash((dict, tuple((digest(key), digest(item)) for key, item in value.items())))
    try:
        return hash((kind, value))
    except TypeError:
        return hash((kind, repr(value)))


def fingerprint(kwargs: Mapping) -> dict[str, tuple[int, ...]]:
    """One hash per item of each input of a reward call (a value that is not a list or tuple: one hash of it)."""
    return {key: tuple(map(digest, value)) if isinstance(value, (list, tuple)) else (digest(value),)
            for key, value in kwargs.items() if key not in HANDLES}


def changed_input(before: Mapping[str, tuple[int, ...]], kwargs: Mapping) -> str | None:
    """What of the inputs `kwargs` differs from their fingerprint `before`, None when nothing does.

    >>> completions = ["a", "b"]
    >>> before = fingerprint({"completions": completions, "trainer_state": object()})
    >>> changed_input(before, {"completions": completions})
    >>> completions.append("c"); changed_input(before, {"completions": completions})
    'completions: 2 items, then 3'
    """
    after = fingerprint(kwargs)
    for key, hashes in before.items():
        now = after[key]
        if now == hashes:
            continue
        if len(now) != len(hashes):
            return f"{key}: {len(hashes)} items, then {len(now)}"
        first = next(i for i, (old, new) in enumerate(zip(hashes, now, strict=True)) if old != new)
        return f"{key}[{first}]" if isinstance(kwargs.get(key), (list, tuple)) else key
    return None
