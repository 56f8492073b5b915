"""What only a resume does: the run-level checks and repairs a fresh run never needs.

A resumed run takes the fresh run's path (`train/run/runner.py`) and asks here at five points:
- `stages_to_train`: a done stage is skipped, unless its final is needed (the run's result, or read by a
  stage still to train) and is not the one run.json recorded (missing; its files differ from its marker's
  digests; its marker another stage's or run's: core/published.py) (`on_damaged_checkpoint`: stop, or
  train it again);
- `adopted_final`: a final published before run.json knew (a kill between the two) is taken as the
  stage's result, if this run trained it and it is intact;
- `trainer_checkpoint`: a stage killed mid-way continues from its newest complete, intact trainer
  checkpoint; those passed over (incomplete or damaged) are named in the log and in run.json;
- `resume_budget`: a stage stopped early (promotion, guard) and killed before it was published
  resumes to that stop, not to its whole budget;
- `logged_before_resume`: the collapse guard's window carries over the steps logged before a kill.
Inside a stage, the trainer continues from that checkpoint (`train.stages.training.resume_and_train`).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from core.jsonl import read_jsonl
from core.published import final_info, final_problem, marker_digest, recorded_final_problem
from core.rundir import METRICS, StageRecord, final_checkpoint, stage_final, stage_path
from curriculum.plan import Stage
from train.run.manifest import Manifest
from train.stages.base import StageResult
from train.stages.checkpoints import scan_checkpoints

log = logging.getLogger(__name__)


def stages_to_train(run_dir: Path, manifest: Manifest, plan: list[Stage], finals_read: Callable[[Stage], set[int]],
                    *, on_damaged: str) -> set[int]:
    """The indices of the stages still to train: those not done, and each done stage whose final is needed (the
    run's result, or read by a stage still to train: `finals_read` names the stages whose finals a stage reads)
    but is not the final run.json recorded for it (missing, damaged, another stage's or run's). Such a final
    either stops the run (`on_damaged: error`) or sends its stage back to be trained again (`retrain`).

    Walked from the last stage back, so that a stage sent back makes the finals it reads needed in turn.
    """
    needed, to_train = {len(plan)}, set()
    for stage in reversed(plan):
        record = manifest.record(stage.index)
        if record.done:
            problem = recorded_final_problem(stage_final(run_dir, record), record) if stage.index in needed else None
            if problem is None:
                continue
            _refuse_final(run_dir, manifest, stage, problem, on_damaged)
        to_train.add(stage.index)
        needed |= finals_read(stage)
    return to_train


def _refuse_final(run_dir: Path, manifest: Manifest, stage: Stage, problem: str, on_damaged: str) -> None:
    """A done stage's final that may not be handed on: stop naming it, or set it aside (`final.refused`, in the
    stage's folder: it may be another stage's intact weights) and send the stage back to pending."""
    record = manifest.record(stage.index)
    said = f"stage {stage.name}: its final checkpoint {record.checkpoint} is missing or damaged ({problem})"
    if on_damaged != "retrain":
        raise RuntimeError(f"{said}; restore it, or set on_damaged_checkpoint=retrain to train the stage "
                           "again from the previous complete checkpoint")
    final = stage_final(run_dir, record)
    if final.is_dir():
        refused = final.with_name("final.refused")
        shutil.rmtree(refused, ignore_errors=True)
        final.rename(refused)
        said += f"; set aside as {refused}"
    log.warning("%s; training it again from the previous stage's checkpoint", said)
    manifest.stage_reset(stage.index)


def adopted_final(run_dir: Path, stage: Stage, config_hash: str) -> StageResult | None:
    """The result held by a complete final of `stage` that run.json does not know of yet (a kill after
    publishing it), None when there is none. A final that this run did not train is refused: with
    run.json lost, a run with another config would otherwise adopt the old run's weights."""
    final = run_dir / final_checkpoint(stage.dirname)
    problem = final_problem(final)
    if problem is not None:
        if final.exists():  # never handed on: the stage trains (or resumes) and publishes it again
            log.warning("stage %s: not adopting %s: %s", stage.name, final, problem)
        return None
    info = final_info(final)
    found = (info.get("stage"), info.get("config_hash"))
    if found != (stage.name, config_hash):
        raise RuntimeError(
            f"{final}: trained as stage {found[0]!r} with config {found[1]}, not as stage {stage.name!r} of "
            f"this run (config {config_hash}), so it is not adopted; move it away to train the stage here, or "
            "resume with the config it was trained with"
        )
    log.info("stage %s: adopting %s, published before run.json recorded it", stage.name, final)
    return StageResult.from_marker(str(final_checkpoint(stage.dirname)), info, marker_digest(final))


def resume_budget(stage: Stage, record: StageRecord) -> Stage:
    """The stage with its budget cut to an early stop that run.json recorded before a kill (so the resume
    publishes the checkpoint saved at that stop, or trains up to it), else the stage as planned.

    A stage sent back to `pending` (a damaged final retrained) starts over with its whole budget.

    >>> stage = Stage(1, "a", "grpo", {2: 1.0}, steps=10, pool=8)
    >>> resume_budget(stage, StageRecord(status="running", end={"reason": "threshold", "stage_step": 4})).steps
    4
    >>> resume_budget(stage, StageRecord(status="pending", end={"reason": "guard", "stage_step": 4})).steps
    10
    """
    end = record.end or {}
    if record.status in ("running", "failed", "trained") and end.get("reason") in ("threshold", "guard"):
        return dataclasses.replace(stage, steps=int(end["stage_step"]))
    return stage


def trainer_checkpoint(run_dir: Path, manifest: Manifest, stage: Stage, world_size: int = 1) -> Path | None:
    """The trainer checkpoint a killed stage (trained by `world_size` processes) continues from: its newest
    complete and intact one (None: the stage's start). Newer ones passed over are named in the log and in
    run.json (`skipped_checkpoints`)."""
    scan = scan_checkpoints(stage_path(run_dir, stage.dirname) / "trainer", world_size)
    for skipped in scan.skipped:
        log.warning("stage %s: not resuming from %s: %s", stage.name, skipped["checkpoint"], skipped["problem"])
    if scan.skipped:
        manifest.checkpoints_skipped(stage.index, scan.skipped)
    if scan.usable is None and scan.skipped:
        log.warning("stage %s: no intact trainer checkpoint; training it from its start", stage.name)
    return scan.usable


def logged_before_resume(run_dir: Path, stage: Stage, checkpoint: Path | None) -> list[dict]:
    """The stage's step rows up to the trainer `checkpoint` a resume continues from ([] on a fresh start):
    later rows are logged again by the resumed steps."""
    if checkpoint is None:
        return []
    resumed_at = int(checkpoint.name.removeprefix("checkpoint-"))
    return [row for row in read_jsonl(run_dir / METRICS)
            if row.get("stage") == stage.index and row.get("kind") == "step" and row["stage_step"] <= resumed_at]
