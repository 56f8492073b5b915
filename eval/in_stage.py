"""`eval.every=N`: validate the current stage's levels every N steps inside a stage, on the live model.

Light on purpose: the stage's own subsets only, greedy, no saved samples; rows go to
`validation_steps.jsonl` ({stage, stage_name, stage_step, global_step, level, the task's columns, metrics,
cost}) and the tracker. Generation goes through the GRPO trainer's colocated vLLM engine when the stage lends one
(`colocated`, set by the stage with `eval.backend` vllm or auto), else through HF `generate` on the live
model: a second vLLM engine beside a training model would compete with it for the card. With many
processes every rank is called at the same step and generates its share of the batches on its own
copy of the live model (data parallelism: every rank holds the whole model; ZeRO-3 and FSDP, which
shard it, are refused in-stage validation by the config check); every rank gets every row.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict

import torch
from transformers import TrainerCallback

from core.distributed import SINGLE, Processes
from curriculum.tasks.base import TaskRecord
from eval.generation import HfEngine
from eval.settings import ValidationSettings
from eval.validation import grade_subset, subset_row, tracked_validation
from eval.vllm_backend import ColocatedEngine


class InStageValidation(TrainerCallback):
    """Every `eval.every` optimizer steps (not at the stage's last: the stage-end validation covers it)."""

    def __init__(self, settings: ValidationSettings, pools: dict[str, list[TaskRecord]], writer, tracker, *,
                 stage_index: int, stage_name: str, step_offset: int, processes: Processes = SINGLE):
        self.settings, self.pools, self.writer, self.tracker = settings, pools, writer, tracker
        self.processes = processes
        self.tags = {"stage": stage_index, "stage_name": stage_name}
        self.step_offset = step_offset
        self.colocated: ColocatedEngine | None = None  # lent by the stage's trainer (`bind`)

    def bind(self, trainer) -> None:
        """Borrow the trainer's colocated vLLM engine (GRPO's rollouts in colocate mode), when validation goes
        through vLLM (`eval.backend` vllm or auto); any other trainer lends none."""
        if self.settings.eval.backend in ("vllm", "auto"):
            self.colocated = ColocatedEngine.of(trainer)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.due(state.global_step, state.max_steps):
            self.validate(model, processing_class, state.global_step)

    def due(self, step: int, max_steps: int) -> bool:
        """Every `eval.every` steps, but not at the stage's last."""
        every = self.settings.eval.every
        return bool(every) and step % every == 0 and step < max_steps

    def validate(self, model, tokenizer, step: int) -> list[dict]:
        """Validate the live model on every pool now; rows written, logged and returned."""
        model.eval()
        # Generation reseeds torch's RNG: fork it, so turning validation on leaves the training run as it was.
        cuda = [model.device.index or 0] if model.device.type == "cuda" else []
        engine = self.colocated.lend(tokenizer) if self.colocated is not None else nullcontext(
            HfEngine(model, tokenizer, batch_size=self.settings.eval.batch_size, processes=self.processes))
        try:
            with torch.random.fork_rng(devices=cuda), engine as generator:
                rows = [self._subset_row(generator, level, records, step) for level, records in self.pools.items()]
        finally:
            model.train()
        self.writer.write(rows)
        for row in rows:
            self.tracker.log(tracked_validation(row, self.settings.task, "val_step"), step=row["global_step"])
        return rows

    def _subset_row(self, generator, level: str, records: list[TaskRecord], step: int) -> dict:
        s = self.settings
        completions, cost = generator.generate(
            s.prompts(records), max_new_tokens=s.eval.max_new_tokens, seed=s.eval.seed, chat_kwargs=dict(s.chat_kwargs),
            label=f"validating {self.tags['stage_name']} step {step}",
        )
        samples = grade_subset(records, completions, s.task)
        return {**self.tags, "stage_step": step, "global_step": self.step_offset + step,
                **subset_row(s.task, level, samples), "cost": asdict(cost)}
