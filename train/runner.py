"""The curriculum run: a plan, then `for stage in plan:` train, hand off, validate.

Order of work, so that a bad input fails before anything expensive and nothing written is lost:
check the config -> lock the run directory -> build every pool and row (prompt lengths checked)
-> baseline validation -> per stage: train from the previous final, publish the final,
validate, mark done. `run.json` records each step; a resume skips what it says is done.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from transformers import AutoTokenizer

from core.models import configure_cpu_threads, resolve_model
from core.rundir import (
    BASELINE,
    CONFIG,
    METRICS,
    VALIDATION,
    VALIDATION_STEPS,
    JsonlWriter,
    RunLock,
    Status,
    final_accuracy,
    final_checkpoint,
    objective,
    samples_dir,
    stage_dirname,
    validation_summary,
)
from curriculum.data import training_pool, validation_pool
from curriculum.plan import Stage, build_plan, validation_subsets
from eval.cost import validation_cost
from eval.settings import validation_settings
from eval.validation import validate
from train.adaptive import resume_budget, stage_callbacks
from train.config_check import STAGE_KINDS, check_config, check_prompt_lengths
from train.manifest import Manifest
from train.stage_run import StageContext, StageKind, check_adoptable, final_info, run_stage
from train.tracking import make_tracker

log = logging.getLogger(__name__)


def run_curriculum(cfg: DictConfig, run_dir: Path, callbacks: tuple = ()) -> float:
    """Run (or resume) the curriculum in `run_dir`; returns the sweep objective.

    `callbacks` (transformers TrainerCallbacks) are added to every stage's trainer.
    """
    plan = build_plan(cfg)
    check_config(cfg, plan)
    log.info("torch CPU threads: %d", configure_cpu_threads(cfg.cpu_threads))
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(run_dir):
        # Data, prompts and their lengths first: bad input fails before anything is written here.
        held_out = {ppl: validation_pool(cfg, ppl) for ppl in _ppls(cfg, plan)}
        base = resolve_model(cfg.model, Path(cfg.paths.cache_dir))
        tokenizer = AutoTokenizer.from_pretrained(base)
        rows, removed = _stage_rows(cfg, plan, held_out, tokenizer)
        check_prompt_lengths(cfg, plan, rows, tokenizer)
        config_file = run_dir / CONFIG
        if not config_file.exists():
            config_file.write_text(OmegaConf.to_yaml(cfg, resolve=True))
        manifest = Manifest.open(run_dir, cfg, plan)
        for stage in plan:
            manifest.update_stage(stage.index, removed_overlap=removed[stage.name])
        manifest.update(base_model=base, status=Status.RUNNING)
        tracker = make_tracker(cfg, run_dir, run_id=f"{run_dir.name}-{manifest.config_hash}")
        try:
            _run_plan(cfg, run_dir, plan, manifest, base, rows, held_out, tracker, callbacks)
        except BaseException:
            manifest.update(status=Status.FAILED)
            raise
        finally:
            tracker.finish()
        value = _objective(str(cfg.objective), manifest)
        manifest.update(status=Status.DONE, objective=value)
    return value


def _ppls(cfg: DictConfig, plan: list[Stage]) -> list[int]:
    """Subsets validated, plus every ppl trained on (their held-out puzzles stay out of training)."""
    return sorted(set(int(p) for p in cfg.eval.subsets) | {p for s in plan for p in s.ppl_weights})


def _stage_rows(cfg, plan, held_out, tokenizer) -> tuple[dict, dict]:
    """Every stage's training rows, and how many held-out overlaps each pool dropped."""
    rows, removed, chat = {}, {}, bool(cfg.model.chat)
    for stage in plan:
        records, removed[stage.name] = training_pool(cfg, stage, held_out)
        rows[stage.name] = STAGE_KINDS[stage.kind].rows(records, cfg.prompt, tokenizer, chat=chat,
                                                        chat_kwargs=cfg.model.get("chat_template_kwargs"))
        log.info("stage %s: %d training puzzles (%d held-out overlaps removed)",
                 stage.name, len(records), removed[stage.name])
    return rows, removed


def _run_plan(cfg, run_dir, plan, manifest, base, rows, held_out, tracker, callbacks) -> None:
    metrics = JsonlWriter(run_dir / METRICS, key=("stage", "stage_step", "kind"))
    validation = JsonlWriter(run_dir / VALIDATION, key=("stage", "ppl"))
    step_rows = JsonlWriter(run_dir / VALIDATION_STEPS, key=("stage", "stage_step", "ppl"))
    subsets = {int(p): held_out[int(p)] for p in cfg.eval.subsets}
    if manifest.baseline is None:
        tag = {"stage": 0, "stage_name": BASELINE, "global_step": 0}
        result = validate(validation_settings(cfg), base, subsets, tag=tag,
                          out_dir=samples_dir(run_dir, stage_dirname(0, BASELINE)), writer=validation, tracker=tracker)
        manifest.update(baseline=validation_summary(result), baseline_validation_cost=validation_cost(result))
    previous, rl_start = base, None
    for stage in plan:
        kind = STAGE_KINDS[stage.kind]
        if kind.learns_from_rewards and rl_start is None:
            rl_start = previous  # where reinforcement learning begins: after any SFT cold start
        entry = manifest.record(stage.index)
        # A done stage's final matters while a later stage still has to start from it.
        needed = stage.index == len(plan) or not manifest.record(stage.index + 1).done
        if entry.done and needed and final_info(run_dir / entry.checkpoint) is None:
            _damaged_final(cfg, stage, entry, manifest)
        if not manifest.record(stage.index).done:
            try:
                offset = manifest.global_step_before(stage.index)
                to_train = resume_budget(stage, manifest.stage(stage.index))  # an early stop a kill interrupted
                adaptive, stage_end = stage_callbacks(cfg, to_train, held_out, {"steps": step_rows, "metrics": metrics},
                                                      tracker, manifest, offset)
                extra = [*callbacks, *adaptive]
                reference = reference_checkpoint(cfg, stage, previous=previous, rl_start=rl_start, base=base)
                ctx = StageContext(cfg, run_dir, base, previous, reference, offset, metrics, tracker, extra)
                _train_stage(kind, to_train, manifest, ctx, rows[stage.name])
                end = stage_end.record(manifest.record(stage.index).steps_done)
                if end is not None:  # why it ended: threshold | guard | budget
                    manifest.update_stage(stage.index, end=end)
            except Exception as err:
                manifest.update_stage(stage.index, status=Status.FAILED, error=f"{type(err).__name__}: {err}")
                raise
            entry = manifest.record(stage.index)
            tag = {"stage": stage.index, "stage_name": stage.name, "global_step": entry.global_step_end}
            chosen = validation_subsets(str(cfg.eval.subsets_after_stage), list(subsets), plan, stage.index)
            result = validate(validation_settings(cfg), str(run_dir / entry.checkpoint),
                              {p: subsets[p] for p in chosen}, tag=tag, out_dir=samples_dir(run_dir, stage.dirname),
                              writer=validation, tracker=tracker)
            manifest.update_stage(stage.index, status=Status.DONE, final_metrics=validation_summary(result),
                                  validation_cost=validation_cost(result))
        previous = str(run_dir / manifest.record(stage.index).checkpoint)


def reference_checkpoint(cfg: DictConfig, stage: Stage, *, previous: str, rl_start: str | None,
                         base: str) -> str | None:
    """The checkpoint a GRPO stage's KL is measured against (`reference`), or None when its beta is 0."""
    if not STAGE_KINDS[stage.kind].has_reference(cfg, stage):
        return None
    return {"previous_stage": previous, "rl_start": rl_start or base, "base": base}[str(cfg.reference)]


def _damaged_final(cfg, stage, entry, manifest) -> None:
    """A done stage whose final is missing or damaged: stop naming it, or retrain it (`on_damaged_checkpoint`)."""
    problem = f"stage {stage.name}: its final checkpoint {entry.checkpoint} is missing or damaged"
    if cfg.on_damaged_checkpoint != "retrain":
        raise RuntimeError(f"{problem}; restore it, or set on_damaged_checkpoint=retrain to train the stage "
                           "again from the previous complete checkpoint")
    log.warning("%s; training it again from the previous stage's checkpoint", problem)
    manifest.update_stage(stage.index, status=Status.PENDING, checkpoint=None)


def _train_stage(kind: StageKind, stage: Stage, manifest: Manifest, ctx: StageContext, rows) -> None:
    """Train unless a complete final already exists (a kill after publishing, before run.json knew)."""
    final = final_checkpoint(stage.dirname)  # relative: a run directory may be moved
    start = ctx.step_offset
    info = final_info(ctx.run_dir / final)
    if info is not None:
        check_adoptable(ctx.run_dir / final, info, stage_name=stage.name, config_hash=manifest.config_hash)
    else:
        manifest.update_stage(stage.index, status=Status.RUNNING, policy_init=ctx.init_model, global_step_start=start)
        began = time.time()
        info = run_stage(kind, stage, ctx, rows)
        info["wall_seconds"] = round(time.time() - began, 2)
    manifest.update_stage(
        stage.index, status=Status.TRAINED, checkpoint=str(final), steps_done=info["steps_done"],
        global_step_start=start, global_step_end=start + info["steps_done"],
        **{k: v for k, v in info.items() if k not in ("steps_done", "checkpoint")},
    )


def _objective(name: str, manifest: Manifest) -> float:
    """What a sweeper optimises (`objective`): mean final accuracy over eval.subsets, or one subset's."""
    value = objective(name, final_accuracy(manifest.data))
    if value is None:
        raise ValueError(f"objective: {name!r} is not mean_final_accuracy or final_accuracy_<n>ppl for a validated n")
    return value
