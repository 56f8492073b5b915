"""The curriculum run: a plan, then `for stage in plan:` train, publish, validate.

Ordered so a bad input fails before anything expensive: lock the run directory, draw every pool and render its rows
(lengths checked), baseline validation, then per stage train, publish, validate; a resume takes the same path. With
many processes only the main one writes, gated in each writer (Manifest, RunLogs, tracker), not at call sites; every
rank decides from the plan, gathered results, or files read before this run's writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from transformers import AutoTokenizer

from conf.schema import RESUME_FREE_KEYS
from core.distributed import SINGLE, Processes, on_main
from core.models import resolve_model
from core.rundir.files import BASELINE, METRICS, RUN_JSON, run_of_final, samples_dir, scan_jsonl, stage_dirname
from core.rundir.manifest import Manifest
from core.rundir.records import (
    Status,
    final_accuracy,
    objective,
    recorded_final_problem,
    stage_final,
    validation_summary,
)
from core.tracker import open_tracker
from curriculum.data import draw_pools
from curriculum.plan import Stage, validation_completions, validation_subsets
from curriculum.tasks.base import TaskRecord
from eval.generation import validation_cost
from eval.validation import validate
from eval.vllm_engine import ProcessEngine
from train.console import RunConsole, StageConsole
from train.failures import failure_line
from train.identity import RunIdentity
from train.run.replay import replay_history
from train.run.resume import StageAction, StageStart, compact_finals, plan_stages
from train.run.stage_end import CollapseGuard, DivergenceStop, SkillCheck, StageEnd
from train.run.start import cpu_warning, process_engine, run_lock, run_size, run_threads
from train.settings import RunSettings
from train.stages.base import StageContext, StageKind
from train.stages.training import CheckpointDigests, ExactStart, WeightSyncGroup, run_stage
from train.tracking import MetricsCallback, RolloutSampler, RunLogs, tracker_config

log = logging.getLogger(__name__)

OFFLINE_RUN = "tracker_offline_run"  # run.json: the offline wandb folder that holds the whole run


def run_curriculum(settings: RunSettings, run_dir: Path, callbacks: tuple = (), processes: Processes = SINGLE, *,
                   identity: RunIdentity | None = None, accepted: Callable[[], None] = lambda: None) -> float:
    """Run (or resume) the curriculum in `run_dir`; returns the sweep objective (on every rank). `callbacks` join
    every stage's trainer; `accepted` is called once nothing can refuse the run, before it changes a resumed one."""
    plan, validation = settings.plan, settings.validation
    if processes.is_main:  # what the run will generate, before anything loads
        size = run_size(settings.grpo, plan, validation, processes.world_size)
        log.info(size.describe())
        warning = None if torch.cuda.is_available() else cpu_warning(size, str(settings.model["name"]))
        if warning:
            log.warning(warning)
    with run_lock(run_dir, processes, settings.config, [stage.name for stage in plan]):
        # Data, prompts and their lengths first: bad input fails before anything is written here.
        pools = draw_pools(settings.task, plan, validation.subsets, n=validation.eval.n, eval_seed=validation.eval.seed,
                           seed=settings.seed)
        sizes = {level: len(records) * validation.eval.samples for level, records in pools.held_out.items()}
        completions = validation_completions(validation.eval.subsets_after_stage, validation.subsets, plan, sizes)
        console = RunConsole(run_dir, plan, level_word=settings.task.report.level_word, rewards=settings.reward_stack,
                             completions=completions)
        # by the main process: save_pretrained writes from rank 0 only, so another rank's cache entry holds no weights
        base = on_main(lambda: resolve_model(settings.model, settings.cache_dir), processes)
        tokenizer, rows = AutoTokenizer.from_pretrained(base), {}
        for stage in plan:  # rendered by its kind, checked against its token budget
            kind = settings.kinds[stage.kind]
            rows[stage.name] = kind.rows(pools.training[stage.name], tokenizer)
            kind.check_lengths(stage, rows[stage.name], tokenizer)
        # run.json opened (or started) by the main process; the others get its contents and save nothing
        planned = [stage.planned_record() for stage in plan]
        opened = on_main(lambda: Manifest.open(run_dir, settings.config, planned, processes.world_size,
                                               free_keys=RESUME_FREE_KEYS).data, processes)
        accepted()
        manifest = Manifest(run_dir / RUN_JSON, opened, writes=processes.is_main)
        manifest.pools_drawn(pools.removed)
        identity = identity or RunIdentity(run_dir.name, None, None)
        threads = run_threads(manifest.fields.get("cpu_threads"), settings.cpu_threads, processes)
        tracked = manifest.fields.get("status") != Status.DONE  # a done run's resume: no new (empty) tracker run
        manifest.fields.pop("error", None)  # a failed attempt's: this one records its own
        manifest.update(base_model=base, status=Status.RUNNING, cpu_threads=threads, reward_stack=settings.reward_stack,
                        tracker_id=manifest.fields.get("tracker_id") or identity.new_id(manifest.fields["config_hash"]),
                        task_report=settings.task.report.as_json())  # how the report shows the task (data only)
        if processes.is_main:
            done = manifest.global_step_before(len(plan) + 1)  # a resume's ETA starts from its earlier step times
            console.started(done_steps=done, earlier_rows=scan_jsonl(run_dir / METRICS).rows if done else [])
        value = _tracked_run(settings, run_dir, rows=rows, base=base, held_out=pools.held_out, manifest=manifest,
                             identity=identity, callbacks=list(callbacks), processes=processes, console=console,
                             tracked=tracked)
    if processes.is_main:
        synced = manifest.fields.get(OFFLINE_RUN)
        console.finished(f"objective {settings.objective} = {value:.3f}", sync=run_dir / synced if synced else None)
    return value


def _tracked_run(settings: RunSettings, run_dir: Path, *, rows: dict, base: str, held_out: dict, manifest: Manifest,
                 identity: RunIdentity, callbacks: list, processes: Processes, console: RunConsole,
                 tracked: bool) -> float:
    """The stage loop inside the run's tracker and vLLM engine; run.json `failed`, or `done` with the objective."""
    tracker = engine = None
    try:
        # inside the try: a tracker that cannot start (wandb.init raising) fails the run, never leaves it running
        tracker = open_tracker(settings.logger, run_dir, name=identity.name, group=identity.group,
                               job_type=identity.job_type, run_id=manifest.fields["tracker_id"],
                               config=tracker_config(settings), writes=processes.is_main and tracked)
        if processes.is_main and tracked:
            # the offline wandb folder (relative to the run), which holds the whole run once a resume replayed into it
            folder = tracker.offline_folder
            if folder is None:
                manifest.fields.pop(OFFLINE_RUN, None)
            else:
                if folder.resolve().is_relative_to(run_dir.resolve()):  # else wandb was told to write elsewhere
                    folder = folder.resolve().relative_to(run_dir.resolve())
                manifest.update(**{OFFLINE_RUN: str(folder)})
        engine = process_engine(settings, base, processes)
        CurriculumRun(
            settings, run_dir, rows=rows, base=base, held_out=held_out, manifest=manifest,
            logs=RunLogs.open(run_dir, tracker, writes=processes.is_main), callbacks=callbacks,
            processes=processes, console=console, engine=engine,
        ).run()
        finals = final_accuracy(manifest.data)
        value = objective(settings.objective, finals)  # what a sweeper optimises
        if value is None:
            raise ValueError(f"objective: {settings.objective!r} is not mean_final_accuracy or "
                             "final_accuracy_<level> for a validated level")
        tracker.summary({"objective": value, **{f"final/{level}/accuracy": acc for level, acc in finals.items()}})
    except BaseException as err:
        # what failed, where no stage records it (a validation, the tracker); a Ctrl-C is no error of the run
        error = failure_line(err, processes.many) if isinstance(err, Exception) else None
        manifest.update(status=Status.FAILED, **({"error": error} if error else {}))
        raise
    finally:
        if tracker is not None:
            tracker.finish()
        if engine is not None:
            engine.close()
    engines = {} if engine is None else {"vllm_engine": engine.record()}
    manifest.update(status=Status.DONE, objective=value, **engines)
    return value


@dataclass
class CurriculumRun:
    """One run's settings, rows and records, and the stage loop over them."""

    settings: RunSettings  # the plan, the stage kinds, validation's settings and the run's choices
    run_dir: Path
    rows: dict  # each stage's training rows, by stage name
    base: str  # the base checkpoint (stage 1 starts from it)
    held_out: dict[str, list[TaskRecord]]  # by level
    manifest: Manifest
    logs: RunLogs
    callbacks: list  # extra TrainerCallbacks for every stage
    processes: Processes = SINGLE  # every rank runs the loop; the main one writes
    console: RunConsole | None = None  # the run's console (None: transformers' own, as in bare TRL)
    engine: ProcessEngine | None = None  # the process's vLLM engine: every validation and colocated rollout

    def run(self) -> None:
        """The baseline, then each stage as `plan_stages` answers, validated; then the finals compacted."""
        resumed = self.manifest.fields["baseline"] is not None  # an earlier attempt logged it, and perhaps stages
        if not resumed:
            summary, cost = self.validate_checkpoint(self.base, 0, BASELINE, global_step=0)
            self.manifest.update(baseline=summary, baseline_validation_cost=cost)
        settings = self.settings
        starts = plan_stages(self.run_dir, self.manifest, settings.plan, self.finals_read,
                             on_damaged=settings.on_damaged, processes=self.processes)
        if resumed:  # an offline tracker's run starts empty: what the earlier attempts logged goes first
            replay_history(self.logs.tracker, self.run_dir, starts, settings.task)
        previous, rl_start = self.base, None
        for stage in settings.plan:
            kind = settings.kinds[stage.kind]
            if kind.facts.learns_from_rewards and rl_start is None:
                rl_start = previous  # where reinforcement learning begins: after any SFT cold start
            start = starts[stage.index]
            if start.action is not StageAction.SKIP:
                reference = None  # the checkpoint the stage's KL is measured against
                if kind.has_reference(stage):
                    reference = {"previous_stage": previous, "rl_start": rl_start or self.base,
                                 "base": self.base}[settings.reference]
                intact(self.run_dir, self.manifest, previous, reference)
                self.train(kind, start, init=previous, reference=reference)
                trained = self.manifest.record(stage.index)
                summary, cost = self.validate_checkpoint(stage_final(self.run_dir, trained), stage.index, stage.name,
                                                         global_step=trained.global_step_end)
                self.manifest.update_stage(stage.index, status=Status.DONE, final_metrics=summary, validation_cost=cost)
                before = self.manifest.fields.get("compacted_finals") or {}
                # the main process rewrites the finals; every rank records what it did (the base model is no final)
                after = on_main(partial(compact_finals, self.run_dir, self.manifest.stages, self.rl_start_index or None,
                                        settings.finals, before), self.processes)
                if after != before:
                    self.manifest.update(compacted_finals=after)
            previous = str(stage_final(self.run_dir, self.manifest.record(stage.index)))

    @property
    def rl_start_index(self) -> int | None:
        """The stage whose final `reference: rl_start` measures KL against (0: the base model), else None."""
        settings = self.settings
        first_rl = next((s.index for s in settings.plan if s.kind_facts.learns_from_rewards), None)
        return first_rl - 1 if settings.reference == "rl_start" and first_rl else None

    def finals_read(self, stage: Stage) -> set[int]:
        """The stages whose finals `stage` reads: the one before it, and `rl_start`'s."""
        read = {stage.index - 1}
        if self.settings.kinds[stage.kind].has_reference(stage) and self.rl_start_index is not None:
            read.add(self.rl_start_index)
        return read - {0}

    def train(self, kind: StageKind, start: StageStart, *, init: str, reference: str | None) -> None:
        """Train the stage from `init` and publish its final (or adopt a killed attempt's); run.json records it."""
        stage = start.stage
        try:
            if start.action is StageAction.ADOPT:
                result = start.adopted
            else:
                offset = self.manifest.global_step_before(stage.index)
                callbacks, ends = self.stage_callbacks(stage, offset, init, history=start.history)
                self.manifest.update_stage(stage.index, status=Status.RUNNING, policy_init=init,
                                           global_step_start=offset)
                context = StageContext(run_dir=self.run_dir, init_model=init, reference_model=reference,
                                       config_hash=self.manifest.fields["config_hash"], task=self.settings.task.name,
                                       keep_trainer_checkpoints=self.settings.keep_trainer_checkpoints,
                                       processes=self.processes, callbacks=callbacks, resume_from=start.checkpoint,
                                       resume_at_budget=start.action is StageAction.PUBLISH, engine=self.engine,
                                       reward_warning=partial(self.manifest.stage_warning, stage.index))
                result = run_stage(kind, stage, context, self.rows[stage.name])
                end = ends.record(result.steps_done)
                if end is not None:  # None: no step trained here (a resume published the checkpoint at its budget)
                    self.manifest.update_stage(stage.index, end=end)  # why: threshold | guard | budget
            self.manifest.stage_trained(stage.index, result)
        except Exception as err:
            self.manifest.stage_failed(stage.index, failure_line(err, self.manifest.world_size != 1))
            raise

    def stage_callbacks(self, stage: Stage, step_offset: int, init: str, *,
                        history: list[dict]) -> tuple[list, StageEnd]:
        """Every callback of the stage's trainer, in calling order, and the `StageEnd` that says why it ended."""
        logs, rollouts, validation = self.logs, self.settings.rollouts, self.settings.validation
        metrics = MetricsCallback(logs.metrics, logs.tracker, stage_index=stage.index, stage_name=stage.name,
                                  level=stage.level_label, step_offset=step_offset, kind=stage.kind_facts)
        guard: CollapseGuard | None = None
        skill: SkillCheck | None = None
        if stage.guard is not None:  # its events go to run.json as they happen: a stage that fails later shows them
            guard = CollapseGuard(stage.guard, logs.metrics, logs.tracker,
                                  partial(self.manifest.guard_event, stage.index), stage_index=stage.index,
                                  stage_name=stage.name, step_offset=step_offset, history=history)
        if validation.eval.every > 0 or stage.promote is not None:
            pools = {level: self.held_out[level][: validation.eval.n] for level in stage.level_weights
                     if level in self.held_out}
            skill = SkillCheck(validation, pools, logs.validation_steps, logs.tracker, stage=stage,
                               step_offset=step_offset, keep_best=guard is not None and guard.action == "stop",
                               processes=self.processes)
        ends = StageEnd(skill, guard, stage.promote.accuracy if stage.promote else None,
                        record_stop=lambda record: self.manifest.update_stage(stage.index, end=record))
        watch = [c for c in (DivergenceStop(stage.name, self.processes), skill, guard, ends) if c is not None]
        shown = [StageConsole(self.console, stage)] if self.console is not None else []
        if stage.kind_facts.learns_from_rewards and logs.rollouts is not None and rollouts.every:
            shown.append(RolloutSampler(logs.rollouts, logs.tracker, every=rollouts.every, groups=rollouts.groups,
                                        stage_index=stage.index, stage_name=stage.name, step_offset=step_offset))
        return [metrics, CheckpointDigests(self.processes), *self.callbacks, *watch, *shown, ExactStart(init),
                WeightSyncGroup()], ends

    def validate_checkpoint(self, model_path, index: int, name: str, *, global_step: int) -> tuple[dict, dict]:
        """Validate a checkpoint after stage `index` (0: the baseline); returns run.json's summary and its cost."""
        tag = {"stage": index, "stage_name": name, "global_step": global_step}
        validation = self.settings.validation
        chosen = validation_subsets(validation.eval.subsets_after_stage, validation.subsets, self.settings.plan, index)
        if self.console is not None:  # the ETA times validations
            self.console.timer.validation_began(index)
        rows = validate(validation, str(model_path), {level: self.held_out[level] for level in chosen}, tag=tag,
                        out_dir=samples_dir(self.run_dir, stage_dirname(index, name)),
                        writer=self.logs.validation, tracker=self.logs.tracker, processes=self.processes,
                        engine=self.engine)
        cost = validation_cost(rows)
        if self.console is not None:
            self.console.timer.validation_ended(index, cost)
        return validation_summary(rows), cost


def intact(run_dir: Path, manifest: Manifest, *checkpoints: str | None) -> None:
    """Refuse to train from, or measure KL against, a final of this run that is not the one run.json recorded."""
    for checkpoint in dict.fromkeys(checkpoints):  # the reference is often the init: checked once
        if checkpoint is not None and run_of_final(Path(checkpoint)) == run_dir:
            index = int(Path(checkpoint).parent.name.split("-", 1)[0])  # stages/<k>-<name>/final, as the run wrote it
            problem = recorded_final_problem(Path(checkpoint), manifest.record(index))
            if problem is not None:
                raise RuntimeError(f"{checkpoint}: damaged since it was published ({problem}); it is not trained "
                                   "from or used as a reference: restore it, or train its stage again")
