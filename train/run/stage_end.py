"""Why a stage ends before its budget, and run.json's record of why it ended (`threshold`, `guard`, `budget`):
promotion (in-stage validation on the stage's own levels), the collapse guard (window means of per-step signals; on a
stop the best-validated weights are put back, so a collapse is not handed on), and NaN or inf before a save.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from transformers import TrainerCallback

from core.checks import is_number
from core.distributed import SINGLE, Processes, gather
from core.rundir.records import row_level
from core.weights import held_weights_finite
from curriculum.plan import GUARD_SIGNALS, Guard, Stage
from eval.settings import ValidationSettings
from eval.validation import InStageValidation

log = logging.getLogger(__name__)


class CollapseWatch:
    """Window means of each watched signal; an event once per crossing of its threshold (re-armed within)."""

    def __init__(self, guard: Guard):
        self.guard = guard
        self.values: dict[str, deque[float]] = {key: deque(maxlen=guard.window) for _, key in GUARD_SIGNALS}
        self.best_length: float | None = None
        self.tripped: set[str] = set()

    def observe(self, row: Mapping) -> list[dict]:
        """Take one logged step's metrics; return the events it triggers."""
        events = []
        for name, key in GUARD_SIGNALS:
            threshold = getattr(self.guard, name)
            value = row.get(key)
            if threshold is None or not is_number(value):
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


def tracked_guard(event: Mapping) -> dict:
    """A collapse guard event (its metrics.jsonl row) as the tracker gets it: `guard/<signal>` = its value.

    >>> tracked_guard({"signal": "entropy", "value": 0.05, "threshold": 0.1})
    {'guard/entropy': 0.05}
    """
    return {f"guard/{event['signal']}": event["value"]}


class CollapseGuard(TrainerCallback):
    """Watches a stage's step lines: each event to metrics.jsonl, tracker, console, run.json; `stop` ends it."""

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
            self.tracker.log(tracked_guard(event), step=event["global_step"])
            log.warning("collapse guard: stage %s step %d: %s = %.3f crossed %.3f over the last %d steps (%s)",
                        self.tags["stage_name"], state.global_step, event["signal"], event["value"],
                        event["threshold"], event["window"], self.action)
            self.record(event)
            if self.action == "stop" and self.stopped is None:
                self.stopped = event
                control.should_training_stop = True


def stage_accuracy(rows: Sequence[Mapping], weights: Mapping[str, float]) -> dict:
    """Accuracy over a stage's own subsets, weighted by its level mix; `n` counts the completions graded.

    >>> rows = [{"level": "2ppl", "accuracy": 1.0, "n": 4}, {"level": "3ppl", "accuracy": 0.5, "n": 4}]
    >>> stage_accuracy(rows, {"2ppl": 0.25, "3ppl": 0.75})
    {'accuracy': 0.625, 'n': 8}
    """
    total = sum(weights[row_level(r)] for r in rows)
    accuracy = sum(weights[row_level(r)] * float(r["accuracy"]) for r in rows) / total
    return {"accuracy": round(accuracy, 4), "n": sum(int(r["n"]) for r in rows)}


class SkillCheck(InStageValidation):
    """In-stage validation at `eval.every` and the promotion cadence; ends the stage at the threshold."""

    def __init__(self, validation: ValidationSettings, pools: dict[str, list], writer, tracker, *, stage: Stage,
                 step_offset: int, keep_best: bool, processes: Processes):
        super().__init__(validation, pools, writer, tracker, stage_index=stage.index, stage_name=stage.name,
                         step_offset=step_offset, processes=processes)
        self.promote, self.weights, self.keep_best = stage.promote, stage.level_weights, keep_best
        self.checks: list[dict] = []  # {stage_step, global_step, accuracy, n} of every validation in the stage
        self.promoted: dict | None = None  # the check that reached the threshold
        self.best: tuple[dict, dict] | None = None  # (check, weights on the CPU) of the best check so far

    def promotion_due(self, step: int, max_steps: int) -> bool:
        promote = self.promote
        return promote is not None and step >= promote.min_steps and step % promote.every == 0 and step < max_steps

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        step = state.global_step
        promotion = self.promotion_due(step, state.max_steps)
        if not (promotion or self.due(step, state.max_steps)):
            return
        rows = self.validate(model, processing_class, step)
        check = {"stage_step": step, "global_step": self.step_offset + step, **stage_accuracy(rows, self.weights)}
        self.checks.append(check)
        if self.keep_best and (self.best is None or check["accuracy"] > self.best[0]["accuracy"]):
            self.best = (check, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
        if promotion and check["accuracy"] >= self.promote.accuracy:
            log.info("stage %s: held-out accuracy %.3f (n=%d) reached %.3f at step %d: promoted",
                     self.tags["stage_name"], check["accuracy"], check["n"], self.promote.accuracy, step)
            self.promoted = check
            control.should_training_stop = True

    def restore_best(self, model) -> dict | None:
        """Put the best-validated weights back into `model`; returns that check (None: nothing kept)."""
        if self.best is None:
            return None
        check, weights = self.best
        model.load_state_dict(weights)
        log.warning("stage %s: keeping the best-validated weights of step %d (accuracy %.3f, n=%d)",
                    self.tags["stage_name"], check["stage_step"], check["accuracy"], check["n"])
        return check


class NonFiniteLossError(RuntimeError):
    """The loss or the weights became NaN or inf; the stage stops and its last good checkpoint stays."""


@dataclass(eq=False)
class DivergenceStop(TrainerCallback):
    """Stops the stage with `NonFiniteLossError` at a non-finite loss or reward (finite components can sum past
    float32) or weights; each rank checks what it holds and the answers are gathered, so all stop at the same step."""

    stage_name: str
    processes: Processes = SINGLE

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "reward"):
            value = (logs or {}).get(key)
            if isinstance(value, float) and not math.isfinite(value):
                self._stop(f"the {key} ({value})", state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # before the trainer saves: diverged weights would crash the next generation or reach the next stage
        if model is not None and not all(gather(held_weights_finite(model), self.processes)):
            self._stop("the weights", state.global_step)

    def _stop(self, what: str, step: int) -> None:
        raise NonFiniteLossError(
            f"stage {self.stage_name}: {what} became non-finite (nan/inf) at step {step}; the stage stops before "
            "saving it, and the last good checkpoint is kept (lower the learning rate or check the reward)"
        )


@dataclass(eq=False)
class StageEnd(TrainerCallback):
    """Collects why a stage ended and restores the best weights after a stop; an early stop saves that step and
    records `end` at once, so a kill before the final is published resumes to the same end."""

    skill: SkillCheck | None
    guard: CollapseGuard | None
    threshold: float | None
    record_stop: Callable[[dict], None]
    trained: bool = False
    stopped: bool = False
    kept: dict | None = None

    def on_step_end(self, args, state, control, **kwargs):
        self.trained = True
        if self.skill is not None and self.skill.promoted is not None and not self.stopped:
            self._stop_here(control, state.global_step)

    def on_log(self, args, state, control, model=None, **kwargs):
        if self.guard is not None and self.guard.stopped is not None and not self.stopped:
            self.kept = self.skill.restore_best(model) if self.skill is not None else None
            self._stop_here(control, state.global_step)

    def _stop_here(self, control, step: int) -> None:
        control.should_save = True
        self.stopped = True
        self.record_stop(self.record(step))

    def record(self, steps_done: int) -> dict | None:
        """run.json's `end` of the stage; None when this process did not train it (nothing new to say)."""
        if not self.trained:
            return None
        checks = self.skill.checks if self.skill is not None else []
        promoted = self.skill.promoted if self.skill is not None else None
        stopped = self.guard.stopped if self.guard is not None else None
        reason = "threshold" if promoted else "guard" if stopped else "budget"
        deciding = promoted or (checks[-1] if checks else None)
        end = {"reason": reason, "stage_step": steps_done, "threshold": self.threshold,
               "accuracy": deciding["accuracy"] if deciding else None, "n": deciding["n"] if deciding else None,
               "checks": checks}
        if stopped:
            end["signal"] = stopped["signal"]
        if self.kept:
            end["kept_step"] = self.kept["stage_step"]
        return end
