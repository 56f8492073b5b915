"""The collapse guard: per-step signals of collapse, watched over a window, acted on (warn or stop).

Signals, per logged step: TRL's `completions/mean_length` and `frac_reward_zero_std`, and
`completions/distinct_share` (the share of distinct completions in a group: near-identical
rollouts are the collapse people saw). TRL never shows a callback the completions, so that one
is measured where they are: `DistinctShare` wraps the first reward function, which sees the whole
generation batch, and reports through TRL's `log_metric` (averaged into the step's log line).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from transformers import TrainerCallback
from trl.trainer.utils import is_async_callable

from curriculum.adaptive import GUARD_SIGNALS, Guard
from eval.grader import completion_text

log = logging.getLogger(__name__)

DISTINCT_KEY = "completions/distinct_share"
_SPACE = re.compile(r"\s+")


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


class DistinctShare:
    """A reward function that also logs `distinct_share` of the batch; TRL sees the wrapped one's name.

    >>> def score(completions, **kwargs):
    ...     return [1.0] * len(completions)
    >>> logged = {}
    >>> wrapped = DistinctShare(score, group_size=2)
    >>> wrapped(completions=["a", "a", "a", "b"], log_metric=logged.__setitem__), wrapped.__name__, logged
    ([1.0, 1.0, 1.0, 1.0], 'score', {'completions/distinct_share': 0.75})
    """

    def __init__(self, func: Callable, group_size: int):
        self.func, self.group_size = func, group_size
        self.__name__ = func.__name__
        self.warned = False

    def __call__(self, *, completions, log_metric=None, **kwargs):
        self._log(completions, log_metric)
        return self.func(completions=completions, log_metric=log_metric, **kwargs)

    def _log(self, completions, log_metric) -> None:
        if log_metric is None:
            return
        if len(completions) % self.group_size:
            # Groups split across processes (multi-GPU): a metric must never stop training; say so once.
            if not self.warned:
                log.warning("distinct share not logged: %d completions are not whole groups of %d",
                            len(completions), self.group_size)
                self.warned = True
            return
        log_metric(DISTINCT_KEY, distinct_share(completions, self.group_size))


class AsyncDistinctShare(DistinctShare):
    """The same around an `async def` reward: TRL awaits it with the others, so the wrapper stays awaitable."""

    async def __call__(self, *, completions, log_metric=None, **kwargs):
        self._log(completions, log_metric)
        return await self.func(completions=completions, log_metric=log_metric, **kwargs)


def with_distinct_share(funcs: Sequence[Callable], group_size: int) -> list[Callable]:
    """The reward functions with the first one logging the distinct share (once per batch, not per function)."""
    if not funcs:
        return []
    wrapper = AsyncDistinctShare if is_async_callable(funcs[0]) else DistinctShare
    return [wrapper(funcs[0], group_size), *funcs[1:]]


class CollapseWatch:
    """Window means of each watched signal; an event when one crosses its threshold (once per crossing).

    Length: the latest window's mean against the best window mean of the stage so far (a drop of
    `length_drop` or more). Zero-variance groups: the window mean at or above `zero_std`. Distinct
    share: the window mean below `distinct_below`. A signal re-arms once it is back within bounds.
    """

    def __init__(self, guard: Guard):
        self.guard = guard
        self.values = {key: deque(maxlen=guard.window) for _, key in GUARD_SIGNALS}
        self.best_length: float | None = None
        self.tripped: set[str] = set()

    def observe(self, row: Mapping) -> list[dict]:
        """Take one logged step's metrics; return the events it triggers."""
        events = []
        for name, key in GUARD_SIGNALS:
            threshold = getattr(self.guard, name)
            value = row.get(key)
            if threshold is None or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            self.values[key].append(float(value))
            if len(self.values[key]) < self.guard.window:
                continue
            mean = sum(self.values[key]) / self.guard.window
            measured, crossed = self._measure(name, mean, threshold)
            if crossed and name not in self.tripped:
                events.append({"signal": name, "value": round(measured, 4), "threshold": threshold,
                               "window": self.guard.window, "metric": key, "window_mean": round(mean, 4)})
            (self.tripped.add if crossed else self.tripped.discard)(name)
        return events

    def _measure(self, name: str, mean: float, threshold: float) -> tuple[float, bool]:
        """(the value compared, whether it crossed the threshold)."""
        if name == "length_drop":
            self.best_length = mean if self.best_length is None else max(self.best_length, mean)
            drop = 1.0 - mean / self.best_length if self.best_length > 0 else 0.0
            return drop, drop >= threshold
        if name == "zero_std":
            return mean, mean >= threshold
        return mean, mean < threshold


class CollapseGuard(TrainerCallback):
    """Watches every step log line of a stage; on an event: metrics.jsonl, the tracker, a console line,
    `record(event)` (run.json), and with `action: stop` the end of the stage."""

    def __init__(self, guard: Guard, writer, tracker, record: Callable[[dict], None], *, stage_index: int,
                 stage_name: str, step_offset: int, history: Sequence[Mapping] = ()):
        self.watch, self.action = CollapseWatch(guard), guard.action
        for row in history:  # steps logged before a resume: the window carries over; their events are recorded
            self.watch.observe(row)
        self.writer, self.tracker, self.record = writer, tracker, record
        self.tags = {"stage": stage_index, "stage_name": stage_name}
        self.step_offset = step_offset
        self.stopped: dict | None = None  # the event that ended the stage

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:  # the stage's summary line is not a step
            return
        for event in self.watch.observe(logs):
            event = {**self.tags, "stage_step": state.global_step, "global_step": self.step_offset + state.global_step,
                     **event, "action": self.action}
            self.writer.write([{**event, "kind": f"guard:{event['signal']}"}])
            self.tracker.log({f"guard/{event['signal']}": event["value"]}, step=event["global_step"])
            log.warning("collapse guard: stage %s step %d: %s = %.3f crossed %.3f over the last %d steps (%s)",
                        self.tags["stage_name"], state.global_step, event["signal"], event["value"],
                        event["threshold"], event["window"], self.action)
            self.record(event)
            if self.action == "stop" and self.stopped is None:
                self.stopped = event
                control.should_training_stop = True
