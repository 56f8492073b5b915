"""Promotion by skill, and why each stage ended (`threshold`, `guard` or `budget`) for run.json.

`promote: {accuracy, every, min_steps}` reuses the in-stage validation (`eval.in_stage`): the
stage's own ppl, `eval.n` held-out puzzles each, greedy, on the live model. When the guard may stop
a stage and the stage validates inside itself, the best-validated weights are kept in memory and
put back before the stage's final is published, so a collapse is not handed to the next stage.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from omegaconf import DictConfig
from transformers import TrainerCallback

from core.rundir import METRICS, read_jsonl, stage_path
from curriculum.plan import Stage
from eval.in_stage import InStageValidation
from train.checkpoints import last_complete_checkpoint
from train.guard import CollapseGuard

log = logging.getLogger(__name__)


def stage_accuracy(rows: Sequence[Mapping], weights: Mapping[int, float]) -> dict:
    """Accuracy over a stage's own subsets, weighted by its ppl mix; `n` counts the completions graded.

    >>> stage_accuracy([{"ppl": 2, "accuracy": 1.0, "n": 4}, {"ppl": 3, "accuracy": 0.5, "n": 4}], {2: 0.25, 3: 0.75})
    {'accuracy': 0.625, 'n': 8}
    """
    total = sum(weights[int(r["ppl"])] for r in rows)
    accuracy = sum(weights[int(r["ppl"])] * float(r["accuracy"]) for r in rows) / total
    return {"accuracy": round(accuracy, 4), "n": sum(int(r["n"]) for r in rows)}


class SkillCheck(InStageValidation):
    """In-stage validation at `eval.every` and at the promotion cadence; ends the stage at the threshold.

    Not at the stage's last step: the budget ends the stage there anyway, and the stage-end
    validation measures it.
    """

    def __init__(self, cfg: DictConfig, pools: dict[int, list[dict]], writer, tracker, *, stage: Stage,
                 step_offset: int, keep_best: bool):
        super().__init__(cfg, pools, writer, tracker, stage_index=stage.index, stage_name=stage.name,
                         step_offset=step_offset)
        self.promote, self.weights, self.keep_best = stage.promote, stage.ppl_weights, keep_best
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


class StageEnd(TrainerCallback):
    """Collects why a stage ended, from the skill check and the guard; restores the best weights after a stop.

    An early stop saves that step's checkpoint (holding the weights the stage ends on) and writes
    the stage's `end` to run.json at once: a kill before the final is published then resumes to the
    same end (`resume_budget`) instead of training on.
    """

    def __init__(self, skill: SkillCheck | None, guard: CollapseGuard | None, threshold: float | None,
                 record_stop: Callable[[dict], None]):
        self.skill, self.guard, self.threshold, self.record_stop = skill, guard, threshold, record_stop
        self.trained = self.stopped = False
        self.kept: dict | None = None

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


def stage_callbacks(cfg: DictConfig, stage: Stage, held_out: Mapping[int, list[dict]], writers: Mapping, tracker,
                    manifest, step_offset: int) -> tuple[list, StageEnd]:
    """The stage's skill check (eval.every or promote), its guard, and the StageEnd that reads both.

    `writers`: {"steps": validation_steps.jsonl, "metrics": metrics.jsonl}. Guard events go to
    run.json as they happen, so a stage that fails later still shows them.
    """
    guard = None
    if stage.guard is not None:
        guard = CollapseGuard(stage.guard, writers["metrics"], tracker, _event_recorder(manifest, stage.index),
                              stage_index=stage.index, stage_name=stage.name, step_offset=step_offset,
                              history=logged_before_resume(manifest.path.parent, stage))
    skill = None
    if int(cfg.eval.every) > 0 or stage.promote is not None:
        pools = {ppl: held_out[ppl][: int(cfg.eval.n)] for ppl in stage.ppl_weights}
        skill = SkillCheck(cfg, pools, writers["steps"], tracker, stage=stage, step_offset=step_offset,
                           keep_best=guard is not None and guard.action == "stop")
    end = StageEnd(skill, guard, stage.promote.accuracy if stage.promote else None,
                   record_stop=lambda record: manifest.update_stage(stage.index, end=record))
    return [c for c in (skill, guard, end) if c is not None], end


def resume_budget(stage: Stage, entry: Mapping) -> Stage:
    """The stage with its budget cut to an early stop that run.json recorded before a kill (so the resume
    publishes the checkpoint saved at that stop, or trains up to it), else the stage as planned.

    A stage sent back to `pending` (a damaged final retrained) starts over with its whole budget.

    >>> stage = Stage(1, "a", "grpo", {2: 1.0}, steps=10, pool=8)
    >>> resume_budget(stage, {"status": "running", "end": {"reason": "threshold", "stage_step": 4}}).steps
    4
    >>> resume_budget(stage, {"status": "pending", "end": {"reason": "guard", "stage_step": 4}}).steps
    10
    """
    end = entry.get("end") or {}
    if entry.get("status") in ("running", "failed", "trained") and end.get("reason") in ("threshold", "guard"):
        return dataclasses.replace(stage, steps=int(end["stage_step"]))
    return stage


def logged_before_resume(run_dir: Path, stage: Stage) -> list[dict]:
    """The stage's step rows up to the trainer checkpoint a resume continues from ([] on a fresh start):
    later rows are logged again by the resumed steps."""
    checkpoint = last_complete_checkpoint(stage_path(run_dir, stage.dirname) / "trainer")
    if checkpoint is None:
        return []
    resumed_at = int(checkpoint.name.removeprefix("checkpoint-"))
    return [row for row in read_jsonl(run_dir / METRICS)
            if row.get("stage") == stage.index and row.get("kind") == "step" and row["stage_step"] <= resumed_at]


def _event_recorder(manifest, index: int):
    """Append a guard event to the stage's `guard_events` in run.json, once (a resumed stage may redo steps)."""
    def record(event: dict) -> None:
        events = manifest.record(index).guard_events
        if any((e["stage_step"], e["signal"]) == (event["stage_step"], event["signal"]) for e in events):
            return
        manifest.update_stage(index, guard_events=[*events, event])

    return record
