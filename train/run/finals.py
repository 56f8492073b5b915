"""What happens to a stage's final once no stage still to train needs it (`finals`: keep, dtype).

A final is published in float32 (the trainer's master weights): the next stage starts from it and,
with `reference: previous_stage`, measures its KL against it, so the handoff is exact. Once the stage
after it is done, nothing the run still trains reads it, apart from the final `reference: rl_start`
points at while a later GRPO stage is to come, and the run's last final (the result). Such a final is
then, by `finals`:
- `dtype: bfloat16`: rewritten in bfloat16 (half the disk; a model's own release precision, and what
  validation on a GPU loads anyway), through a temporary folder and a rename, its stage.json saying so and
  naming the marker it replaces (`compacted_from`: run.json's record of the stage still vouches for it);
- `keep: last`: removed.
A resume only needs the finals a stage still to train starts from (train/run/resume.py `stages_to_train`
skips a done stage whose successor is done), so neither breaks it. run.json's `compacted_finals`
records what was done to which. Never in float32 before its successor is done: bfloat16 keeps 8 bits of
mantissa, and a stage's updates at GRPO's learning rates (~1e-6 of a weight) would round away.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conf.schema import FinalsConfig
from core.rundir.records import StageRecord, final_info, marker_digest
from core.weights import zero3_init_paused
from train.stages.training import publish_final

log = logging.getLogger(__name__)


def finals_to_compact(stages: Sequence[StageRecord], rl_start: int | None) -> list[StageRecord]:
    """The done stages whose finals nothing still to train reads: the next stage is done (it started from
    this one and measured KL to it), it is not the last stage, and it is not the `rl_start` final (stage
    index `rl_start`) while a GRPO stage after it is still to train.

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
        # the marker run.json recorded is named in the new one: run.json's record still vouches for it
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

