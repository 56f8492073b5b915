"""How long a run has left, from what this run has measured so far (steps, stage starts and saves, validations by
their planned completions), never from a table of guesses: untimed work is named, not guessed. Recent, not whole-run,
means for what generates, as a GRPO policy's completions change length (whole-run means overestimated by up to 30%).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

# A kind's step time: the mean of its last few steps (smooths one slow step, follows the completions as they change)
RECENT_STEPS = 3


@dataclass
class Part:
    """One kind of work left: how many, and the seconds each takes (None: not timed yet); `note`: how `each` is made."""

    what: str
    count: int
    each: float | None
    note: str = ""


@dataclass
class Estimate:
    """The time left: the sum of the timed parts, and the parts not timed yet (the console words it)."""

    parts: list[Part]

    @property
    def seconds(self) -> float:
        return sum(p.count * p.each for p in self.parts if p.each is not None)

    @property
    def untimed(self) -> list[Part]:
        return [p for p in self.parts if p.each is None and p.count]


@dataclass
class _Validation:
    wall: float
    generating: float
    completions: int


@dataclass
class RunTimer:
    """The run's work, planned and timed: stage kinds and budgets, each validation's completions, and a clock."""

    kinds: dict[int, str]  # stage index -> its kind's label (core/stage_kinds.py): each kind's steps timed apart
    steps: dict[int, int]  # stage index -> its step budget (an early end lowers it)
    completions: dict[int, int]  # stage index (0: baseline) -> the completions of the validation after it
    clock: Callable[[], float] = time.monotonic
    step_times: dict[str, list[float]] = field(default_factory=dict)
    starts: dict[str, list[float]] = field(default_factory=dict)
    saves: dict[str, list[float]] = field(default_factory=dict)
    validations: list[_Validation] = field(default_factory=list)
    current: int | None = None  # the stage training or last trained
    done_steps: int = 0  # of the current stage
    validated: set[int] = field(default_factory=set)
    _mark: float | None = None  # when the phase being timed began

    def remember_steps(self, rows: Iterable[Mapping]) -> None:
        """A resumed run's earlier step times (metrics.jsonl rows, untrusted), so its ETA starts from them.

        >>> timer = RunTimer({1: "GRPO"}, {1: 4}, {})
        >>> timer.remember_steps([{"stage": 1, "step_time": 20.0}, {"stage": 1, "step_time": "x"}, {"stage": [1]},
        ...                       {"stage": 9, "step_time": 5.0}, {"stage": 1, "step_time": float("nan")}])
        >>> timer.step_times
        {'GRPO': [20.0]}
        """
        for row in rows:
            stage, seconds = row.get("stage"), row.get("step_time")
            if (type(stage) is int and stage in self.kinds and isinstance(seconds, (int, float))
                    and not isinstance(seconds, bool) and math.isfinite(seconds) and seconds > 0):
                self.step_times.setdefault(self.kinds[stage], []).append(float(seconds))

    def training_began(self, index: int, done_steps: int = 0) -> None:
        """Stage `index` takes its first step now; its start ran from the end of the last validation."""
        now = self.clock()
        if self._mark is not None:
            self.starts.setdefault(self.kinds[index], []).append(now - self._mark)
        self.validated |= {i for i in self.completions if i < index}  # a resume skipped them
        self.current, self.done_steps, self._mark = index, done_steps, now

    def step_ended(self) -> None:
        now = self.clock()
        self.step_times.setdefault(self.kinds[self.current], []).append(now - self._mark)
        self.done_steps, self._mark = self.done_steps + 1, now

    def training_ended(self, steps: int) -> None:
        """The stage's trainer is done after `steps` of its budget (fewer: it ended early); its save begins."""
        self.steps[self.current] = steps
        self._mark = self.clock()

    def validation_began(self, index: int) -> None:
        now = self.clock()
        if index and index == self.current and self._mark is not None:
            self.saves.setdefault(self.kinds[index], []).append(now - self._mark)
        self._mark = now

    def validation_ended(self, index: int, cost: Mapping | None) -> None:
        """The validation after stage `index` (0: the baseline) is done, at `cost` (`validation_cost`)."""
        cost = cost or {}
        generating = float(cost.get("seconds") or 0.0) - float(cost.get("setup_seconds") or 0.0)
        now = self.clock()
        self.validations.append(_Validation(now - self._mark, generating, int(cost.get("completions") or 0)))
        self.validated.add(index)
        self._mark = now

    def estimate(self) -> Estimate:
        """The work left, part by part, at the means measured so far."""
        training = self.current is not None and self.current not in self.validated
        later = [i for i in sorted(self.steps) if self.current is None or i > self.current]
        parts = []
        for kind in dict.fromkeys(self.kinds[i] for i in sorted(self.kinds)):
            left = sum(self.steps[i] for i in later if self.kinds[i] == kind)
            if training and self.kinds[self.current] == kind:
                left += max(self.steps[self.current] - self.done_steps, 0)
            parts.append(Part(f"{kind} step", left, _mean(self.step_times.get(kind, [])[-RECENT_STEPS:])))
        parts.append(Part("stage start", len(later), self._around(self.starts, later)))
        saving = later + ([self.current] if training else [])
        parts.append(Part("stage save", len(saving), self._around(self.saves, saving)))
        left = [self.completions[i] for i in sorted(self.completions) if i not in self.validated
                and (self.current is None or i >= self.current)]
        if self.validations and left:  # the latest validation's rate per completion, the mean fixed part
            rate = self.validations[-1].generating / max(self.validations[-1].completions, 1)
            fixed = _mean([v.wall - v.generating for v in self.validations])
            note = f" ({sum(left)} completions at {rate:.2f} s, {fixed:.0f} s start and grading each)"
            parts.append(Part("validation", len(left), fixed + rate * sum(left) / len(left), note))
        else:
            parts.append(Part("validation", len(left), None))
        return Estimate(parts)

    def _around(self, timed: dict[str, list[float]], stages: list[int]) -> float | None:
        """The mean start (or save) of these stages' kinds, each kind's own where timed, else every kind's."""
        every = _mean([t for times in timed.values() for t in times])
        each = [_mean(timed.get(self.kinds[i])) or every for i in stages]
        return None if None in each else _mean(each)


def _mean(values) -> float | None:
    return sum(values) / len(values) if values else None
