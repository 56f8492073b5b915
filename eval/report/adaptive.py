"""What the report shows of adaptive stages and of a sweep's curricula, as plain data (no matplotlib).

From run.json: where stages were promoted on skill and where the collapse guard fired (each stage's
`end` and `guard_events`, written by the stage loop). From a sweep's jobs: each job's training
length per step and its label, so curricula with different stage counts (a 5-stage ladder, a
1-stage mix) overlay on one plot (their accuracy: `eval.report.series.accuracy_curve`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.checks import is_int
from core.rundir.records import stage_records
from core.stats import rate_text
from eval.report.blocks import short_number
from eval.report.series import Series, as_number, step_series

PROMOTION, GUARD, REFRESH = "promotion", "guard", "refresh"


@dataclass(frozen=True)
class Event:
    """A point in training to mark on the per-step plots."""

    step: float  # global step
    label: str
    kind: str  # promotion | guard | refresh (a stage whose KL reference is the previous stage's final)


def _accuracy_text(end: dict) -> str:
    """The deciding accuracy with its 95% interval and n (the completions of the stage's own subsets)."""
    n = end.get("n")
    return rate_text(as_number(end.get("accuracy")), n if is_int(n) else None)


def promotion_points(manifest: dict) -> list[Event]:
    """Stages that ended on skill, at their last global step.

    >>> stages = [{"name": "2ppl", "global_step_end": 6, "end": {"reason": "threshold", "accuracy": 0.8,
    ...            "n": 100, "threshold": 0.75}}, {"name": "3ppl", "end": {"reason": "budget"}}]
    >>> promotion_points({"stages": stages})
    [Event(step=6, label='2ppl promoted: 0.800 [0.71, 0.87] n=100 >= 0.75', kind='promotion')]
    """
    return [Event(s.global_step_end, f"{s.name} promoted: {_accuracy_text(s.end)} >= {s.end.get('threshold')}",
                  PROMOTION)
            for s in stage_records(manifest)
            if (s.end or {}).get("reason") == "threshold" and as_number(s.global_step_end) is not None]


def guard_events(manifest: dict) -> list[Event]:
    """Every collapse-guard event recorded in run.json, at its global step.

    >>> stage = {"guard_events": [{"global_step": 12, "signal": "length_drop", "value": 0.6, "action": "stop"}]}
    >>> guard_events({"stages": [stage]})
    [Event(step=12, label='length_drop 0.6 (stop)', kind='guard')]
    """
    return [Event(e["global_step"], f"{e.get('signal')} {e.get('value')} ({e.get('action')})", GUARD)
            for s in stage_records(manifest) for e in s.guard_events
            if as_number(e.get("global_step")) is not None]


def stage_end_rows(manifest: dict) -> list[list[str]]:
    """Per stage that recorded one: name, why it ended, at which stage step of its budget, the deciding
    accuracy (with n), the threshold, and the step whose weights were kept after a guard stop.

    >>> stage_end_rows({"stages": [{"name": "2ppl", "steps_budget": 10, "end": {"reason": "threshold",
    ...     "stage_step": 5, "accuracy": 0.9, "n": 100, "threshold": 0.8}}, {"name": "3ppl"}]})
    [['2ppl', 'threshold', '5/10', '0.900 [0.83, 0.94] n=100', '0.8', '-']]
    """
    rows = []
    for stage in stage_records(manifest):
        end = stage.end
        if not isinstance(end, dict):
            continue
        reason = end.get("reason", "-") + (f" ({end['signal']})" if end.get("signal") else "")
        budget = "-" if stage.steps_budget is None else stage.steps_budget
        rows.append([str(stage.name), reason, f"{end.get('stage_step')}/{budget}",
                     _accuracy_text(end), "-" if end.get("threshold") is None else str(end["threshold"]),
                     str(end.get("kept_step", "-"))])
    return rows


def guard_rows(manifest: dict) -> list[list[str]]:
    """One row per guard event: stage, stage step, global step, signal, measured value, threshold, window, action."""
    return [[str(s.name), str(e.get("stage_step")), str(e.get("global_step")), str(e.get("signal")),
             str(e.get("value")), str(e.get("threshold")), str(e.get("window")), str(e.get("action"))]
            for s in stage_records(manifest) for e in s.guard_events]


# --- a sweep's curricula overlaid ---------------------------------------------------------------------


def length_curve(steps: Sequence[dict], label: str) -> Series | None:
    """A job's training mean completion length per global step."""
    return step_series(steps, "completions/mean_length", label)


def job_label(overrides: dict[str, str], params: Sequence[str], name: str) -> str:
    """A job's legend entry: its values of the swept parameters ("curriculum=kk_adaptive"; a long decimal to 3
    significant digits), else its number.

    >>> job_label({"curriculum": "kk_adaptive", "seed": "1"}, ["curriculum"], "3")
    'curriculum=kk_adaptive'
    >>> job_label({"reward.weights.format": "0.3745401188473625"}, ["reward.weights.format"], "3")
    'reward.weights.format=0.375'
    >>> job_label({}, [], "3")
    'job 3'
    """
    parts = [f"{p}={short_number(overrides[p])}" for p in params if p in overrides]
    return ", ".join(parts) if parts else f"job {name}"
