"""How each stage starts in this attempt at a run (`plan_stages`, asked once before the stage loop), and what
becomes of a final once no stage still to train reads it (`compact_finals`). A resumed attempt may skip a done stage,
adopt a final published before run.json knew of it, continue a killed stage from its newest intact trainer
checkpoint (or publish that one at the budget), and cut a stage stopped early to that stop.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conf.schema import FinalsConfig
from core.distributed import Processes, on_main
from core.rundir.files import METRICS, REFUSED_FINAL, final_checkpoint, read_jsonl, stage_path
from core.rundir.manifest import Manifest
from core.rundir.records import (
    StageRecord,
    StageResult,
    final_info,
    final_problem,
    marker_digest,
    recorded_final_problem,
    stage_final,
)
from core.weights import zero3_init_paused
from curriculum.plan import Stage
from train.failures import failure_line
from train.stages.training import checkpoint_step, publish_final, scan_checkpoints

log = logging.getLogger(__name__)


class StageAction(Enum):
    TRAIN = "train"  # from its start, or on from `checkpoint` (a kill mid-stage)
    PUBLISH = "publish"  # `checkpoint` is at its budget (a kill while its final was written): published, no step
    ADOPT = "adopt"  # its final was published before run.json recorded it (a kill between the two)
    SKIP = "skip"  # done, its final the one run.json recorded (where anything still reads it)


@dataclass(frozen=True)
class StageStart:
    """How one stage starts in this attempt."""

    action: StageAction
    stage: Stage  # as planned, its budget cut to an early stop a kill interrupted
    checkpoint: Path | None = None  # the trainer checkpoint it goes on from (TRAIN) or publishes (PUBLISH)
    history: list[dict] = field(default_factory=list)  # its step rows logged up to `checkpoint` (the guard's window)
    adopted: StageResult | None = None  # ADOPT: what its final holds


def plan_stages(run_dir: Path, manifest: Manifest, plan: list[Stage], finals_read: Callable[[Stage], set[int]], *,
                on_damaged: str, processes: Processes) -> dict[int, StageStart]:
    """How each stage of `plan` starts, by index (`finals_read`: the stages whose finals a stage reads). The main
    process alone decides which done stages train again (it sets a refused final aside); every rank follows."""
    done = {s.index for s in manifest.stages if s.done}
    to_train = on_main(lambda: stages_to_train(run_dir, manifest, plan, finals_read, on_damaged=on_damaged),
                       processes)
    if not processes.is_main:
        for index in sorted(to_train & done):
            manifest.stage_reset(index)
    starts = {}
    for stage in plan:
        if stage.index not in to_train:
            starts[stage.index] = StageStart(StageAction.SKIP, stage)
            continue
        try:
            adopted = adopted_final(run_dir, stage, manifest.fields["config_hash"])
        except RuntimeError as err:  # a final this run did not train: the stage fails, and run.json says why
            manifest.stage_failed(stage.index, failure_line(err, manifest.world_size != 1))
            raise
        if adopted is not None:
            starts[stage.index] = StageStart(StageAction.ADOPT, stage, adopted=adopted)
            continue
        budget = resume_budget(stage, manifest.record(stage.index))
        # the newest complete, intact trainer checkpoint; the newer ones passed over are named in the log and run.json
        scan = scan_checkpoints(stage_path(run_dir, stage.dirname) / "trainer", processes.world_size)
        for skipped in scan.skipped:
            log.warning("stage %s: not resuming from %s: %s", stage.name, skipped["checkpoint"], skipped["problem"])
        if scan.skipped:
            manifest.checkpoints_skipped(stage.index, scan.skipped)
        if scan.usable is None and scan.skipped:
            log.warning("stage %s: no intact trainer checkpoint; training it from its start", stage.name)
        if scan.usable is None:
            starts[stage.index] = StageStart(StageAction.TRAIN, budget)
            continue
        action = StageAction.PUBLISH if checkpoint_step(scan.usable) >= budget.steps else StageAction.TRAIN
        starts[stage.index] = StageStart(action, budget, scan.usable, logged_before_resume(run_dir, stage, scan.usable))
    return starts


def stages_to_train(run_dir: Path, manifest: Manifest, plan: list[Stage], finals_read: Callable[[Stage], set[int]],
                    *, on_damaged: str) -> set[int]:
    """The stages still to train: those not done, and each done one whose needed final is not the one run.json
    recorded (`on_damaged`: error stops, retrain sends it back); walked backwards, as a stage sent back needs the
    finals it reads."""
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
    """Stop, or set aside a final that may not be handed on (`final.refused`) and send its stage back to pending."""
    record = manifest.record(stage.index)
    said = f"stage {stage.name}: its final checkpoint {record.checkpoint} is missing or damaged ({problem})"
    if on_damaged != "retrain":
        raise RuntimeError(f"{said}; restore it, or set on_damaged_checkpoint=retrain to train the stage "
                           "again from the previous complete checkpoint")
    final = stage_final(run_dir, record)
    if final.is_dir():
        refused = final.with_name(REFUSED_FINAL)
        shutil.rmtree(refused, ignore_errors=True)
        final.rename(refused)
        said += f"; set aside as {refused}"
    log.warning("%s; training it again from the previous stage's checkpoint", said)
    manifest.stage_reset(stage.index)


def adopted_final(run_dir: Path, stage: Stage, config_hash: str) -> StageResult | None:
    """The result of a complete final run.json does not know of yet (a kill after publishing it), or None; one this
    run did not train is refused (with run.json lost, another config would adopt the old run's weights)."""
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
    """The stage with its budget cut to an early stop run.json recorded before a kill, else as planned (a stage
    sent back to `pending` starts over with its whole budget).

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


def logged_before_resume(run_dir: Path, stage: Stage, checkpoint: Path | None) -> list[dict]:
    """The stage's step rows up to the `checkpoint` a resume continues from (later ones are logged again)."""
    if checkpoint is None:
        return []
    resumed_at = checkpoint_step(checkpoint)
    return [row for row in read_jsonl(run_dir / METRICS)
            if row.get("stage") == stage.index and row.get("kind") == "step" and row["stage_step"] <= resumed_at]


# `finals`: a final is published in float32 (bfloat16 would round away ~1e-6 updates); once nothing still to train
# reads it, it is rewritten in bfloat16 (naming the marker it replaces, `compacted_from`) or removed (`keep: last`)


def finals_to_compact(stages: Sequence[StageRecord], rl_start: int | None) -> list[StageRecord]:
    """The done stages whose finals nothing still to train reads: not the last, the next one done, and not the
    `rl_start` final while a GRPO stage after it is to train.

    >>> done, todo = StageRecord(index=1, status="done"), StageRecord(index=3, kind="grpo", status="pending")
    >>> [s.index for s in finals_to_compact([done, StageRecord(index=2, status="done"), todo], rl_start=None)]
    [1]
    >>> finals_to_compact([done, StageRecord(index=2, status="done"), todo], rl_start=1)
    []
    """
    out = []
    for i, stage in enumerate(stages[:-1]):
        after = stages[i + 1:]
        pending_rl = any(s.kind_facts.learns_from_rewards and not s.done for s in after)
        if stage.done and after[0].done and not (stage.index == rl_start and pending_rl):
            out.append(stage)
    return out


def compact_final(final_dir: Path, settings: FinalsConfig) -> str | None:
    """Apply `settings` to one final no longer needed; returns what was done ("removed", "bfloat16") or None."""
    if not final_dir.is_dir():
        return None
    if settings.keep == "last":
        shutil.rmtree(final_dir)
        return "removed"
    if settings.dtype == "bfloat16":
        info = final_info(final_dir)
        if info is None or info.get("dtype") == "bfloat16":
            return None  # damaged (left for a resume to report) or done before
        tmp = final_dir.with_name("final.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with zero3_init_paused():  # the main process alone: never ZeRO-3's collective load (core/weights.py)
            AutoModelForCausalLM.from_pretrained(final_dir, dtype=torch.bfloat16).save_pretrained(tmp)
        AutoTokenizer.from_pretrained(final_dir).save_pretrained(tmp)
        publish_final(tmp, final_dir, {**info, "dtype": "bfloat16", "compacted_from": marker_digest(final_dir)})
        return "bfloat16"
    return None


def compact_finals(run_dir: Path, stages: Sequence[StageRecord], rl_start: int | None,
                   settings: FinalsConfig, done_before: dict) -> dict:
    """Compact every final `finals_to_compact` names; returns run.json's `compacted_finals` (dirname -> what)."""
    done = dict(done_before)
    if settings.keep == "all" and settings.dtype == "float32":
        return done
    for stage in finals_to_compact(stages, rl_start):
        final_dir = run_dir / str(stage.checkpoint)
        if stage.checkpoint is None or done.get(stage.checkpoint) == "removed":
            continue
        what = compact_final(final_dir, settings)
        if what is not None:
            log.info("finals: %s %s (finals.keep=%s, finals.dtype=%s)", stage.checkpoint, what, settings.keep,
                     settings.dtype)
            done[stage.checkpoint] = what
    return done
