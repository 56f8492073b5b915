"""Validation of one checkpoint on every subset, graded by the task (the grader its rewards use), and inside a stage
on the live model (`InStageValidation`). A row per subset goes to `validation.jsonl`, every graded completion to
`samples/<stage>/<level>.jsonl`, a table to the console; every rank grades all gathered completions (each decides
alike), the main one alone writes. Inside a stage it borrows the trainer's colocated vLLM engine where it lends one,
else HF on the live model (a second engine would compete with training for the card).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import asdict
from pathlib import Path

import torch
from rich import box
from rich.console import Console
from rich.table import Table
from transformers import AutoTokenizer, TrainerCallback

from core.checks import call_user_code
from core.distributed import SINGLE, Processes
from core.models import load_for_inference
from core.rundir.files import samples_file, write_text_atomic
from core.rundir.records import row_level
from core.stats import percent_text, wilson_interval
from curriculum.tasks.base import Task, TaskRecord, TaskReport
from eval.generation import HfEngine
from eval.metrics import METRIC_COLUMNS, RATES, subset_metrics, trials
from eval.settings import ValidationSettings, validation_backend
from eval.vllm_engine import ColocatedEngine, ProcessEngine, engine_arguments, validation_arguments

# The tracker's sample table: what a person filters on (and the answer against the reference), then the text.
SAMPLE_COLUMNS = ("id", "correct", "format_ok", "tokens", "truncated", "answer", "reference")
# (validation row key, console header): every task's rates a person reads first, each in % with its interval.
CONSOLE_RATES = (("format_rate", "format %"), ("truncation_rate", "truncated %"))


def grade_subset(records: list[TaskRecord], completions, task: Task) -> list[dict]:
    """Every completion of a subset graded by `task`: the sample rows to save (with the task's `sample_fields`)."""
    samples = []
    for record, outs in zip(records, completions, strict=True):
        for k, out in enumerate(outs):
            g = call_user_code(f"task {task.name}'s grade", task.grade, out.text, record.columns)
            samples.append({
                "id": record.id, "sample": k, "question": record.question, "completion": out.text, "tokens": out.tokens,
                "truncated": out.truncated, "correct": g.correct, "format_ok": g.format_ok, "answered": g.answered,
                "reasons": list(g.reasons),
                **call_user_code(f"task {task.name}'s sample_fields", task.sample_fields, record, out.text, g),
            })
    return samples


def subset_row(task: Task, level: str, samples: list[dict]) -> dict:
    """A validation row's level, the task's level columns, every task's metrics and the task's own."""
    return {"level": level, **task.level_columns(level), **subset_metrics(samples), **task.subset_metrics(samples)}


def tracked_validation(row: dict, task: Task, prefix: str = "val") -> dict:
    """A row's metrics as the tracker gets them, `<prefix>/<level>/<metric>`, each rate's 95% Wilson interval beside.

    >>> from curriculum.tasks.kk import KKTask
    >>> row = {"level": "2ppl", "accuracy": 0.5, "n": 4, "mean_tokens": 9.0, "lenient_accuracy": 0.5}
    >>> m = tracked_validation(row, KKTask(), "val_step")
    >>> m["val_step/2ppl/accuracy_low"], m["val_step/2ppl/accuracy_high"], m["val_step/2ppl/lenient_accuracy_high"]
    (0.15, 0.85, 0.85)
    >>> "val_step/2ppl/mean_tokens_low" in m
    False
    """
    found = {k: row[k] for k in (*METRIC_COLUMNS, *task.metric_columns) if row.get(k) is not None}
    counted = {rate.key: rate.counted for rate in task.report.rates}
    for key in [k for k in found if k in RATES or k in counted]:
        n = trials(row, key, counted.get(key, ()))
        if n:
            found[f"{key}_low"], found[f"{key}_high"] = (round(b, 4) for b in wilson_interval(found[key], n))
    return {f"{prefix}/{row['level']}/{k}": v for k, v in found.items()}


def validate(settings: ValidationSettings, model_path: str, pools: Mapping[str, list[TaskRecord]], *, tag: dict,
             out_dir: Path, writer=None, tracker=None, console: Console | None = None,
             processes: Processes = SINGLE, engine: ProcessEngine | None = None) -> list[dict]:
    """Generate, grade and record every subset in `pools` for the checkpoint at `model_path`; the rows, on every rank.
    `tag` prefixes every row; each goes to `writer` once graded, so an interrupt keeps the subsets done."""
    s, rows = settings, []
    generation = {"max_new_tokens": s.eval.max_new_tokens, "temperature": s.eval.temperature,
                  "samples": s.eval.samples, "chat_kwargs": dict(s.chat_kwargs), "seed": s.eval.seed}
    step, record = int(tag.get("global_step", 0)), processes.is_main
    if console is None:  # not a terminal (a log, a pipe): 100 columns, where rich's 80 wraps rates under intervals
        console = Console()
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console.width = max(console.width, 100)
    with validation_engine(s, model_path, processes, engine) as generator:
        levels = list(pools)  # in the task's order, easiest first
        for i, level in enumerate(levels):
            records = pools[level]
            stage = tag.get("stage_name")  # said once where the stage is named by its level ("3ppl")
            label = f"validating {level}" if stage in (None, level) else f"validating {level} after {stage}"
            completions, cost = generator.generate(s.prompts(records), label=label, **generation)
            samples = grade_subset(records, completions, s.task)
            rows.append({**tag, **subset_row(s.task, level, samples), "cost": asdict(cost)})
            if not record:
                continue
            out_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(samples_file(out_dir, level), "".join(json.dumps(x) + "\n" for x in samples))
            if writer is not None:
                writer.write(rows[-1:])
            if tracker is not None:
                tracker.table(f"val/{level}/samples", [sample_cells(tag, level, sample, s.task.report.sample_columns)
                                                       for sample in samples], step)
            console.print(progress_line(rows, [len(pools[later]) * s.eval.samples for later in levels[i + 1:]]),
                          highlight=False)
    if tracker is not None and record:
        for row in rows:  # `stage` beside: validation panels are drawn over the stage (train/tracking.py)
            tracker.log({"stage": tag.get("stage"), **tracked_validation(row, s.task)}, step=step)
    if record:
        console.print(results_table(rows, f"validation after {tag.get('stage_name')}", s.task.report))
    return rows


def progress_line(rows: list[dict], left: list[int]) -> str:
    """A subset done: its completions and seconds, and the time left at the rate so far (a floor).

    >>> rows = [{"level": "2ppl", "cost": {"seconds": 30.0, "setup_seconds": 5.0, "completions": 60}}]
    >>> progress_line(rows, [100, 100])
    '  2ppl validated: 60 completions in 35 s; 2 subsets left, ~100 s at this rate'
    >>> progress_line(rows, [])
    '  2ppl validated: 60 completions in 35 s'
    """
    cost = rows[-1]["cost"]
    line = f"  {row_level(rows[-1])} validated: {cost['completions']} completions in " \
           f"{cost['seconds'] + cost['setup_seconds']:.0f} s"
    done = sum(r["cost"]["completions"] for r in rows)
    if not left or not done:
        return line
    per_completion = sum(r["cost"]["seconds"] for r in rows) / done
    subsets = f"{len(left)} subset{'s' if len(left) > 1 else ''}"
    return f"{line}; {subsets} left, ~{per_completion * sum(left):.0f} s at this rate"


def sample_cells(tag: Mapping, level: str, sample: Mapping, task_columns: tuple[str, ...] = ()) -> dict:
    """One graded completion as a tracker table row: every task's columns, the task's own, question and completion."""
    keys = (*SAMPLE_COLUMNS, *task_columns)
    return {"stage": tag.get("stage_name"), "level": level, **{k: sample.get(k) for k in keys},
            "question": sample.get("question"), "completion": sample.get("completion")}


@contextmanager
def validation_engine(settings: ValidationSettings, model_path: str, processes: Processes = SINGLE,
                      engine: ProcessEngine | None = None) -> Iterator:
    """What generates one validation: vLLM (the process's `engine`, else one closed after) or HF on this device."""
    if validation_backend(settings.eval.backend, model_path, processes) == "vllm":  # vLLM loads the weights itself
        arguments = validation_arguments(settings.eval.vllm_gpu_memory_utilization, settings.eval.seed)
        shared = engine or ProcessEngine(engine_arguments(arguments, rollouts=False), rollouts=False)
        try:
            with shared.validating(model_path, AutoTokenizer.from_pretrained(model_path)) as vllm:
                yield vllm
        finally:
            if engine is None:
                shared.close()
        return
    began = time.perf_counter()
    device = f"cuda:{processes.local_rank}" if torch.cuda.is_available() else "cpu"  # this process's own GPU
    model, tokenizer = load_for_inference(model_path, device)
    yield HfEngine(model, tokenizer, batch_size=settings.eval.batch_size, setup_seconds=time.perf_counter() - began,
                   processes=processes)


def results_table(rows: list[dict], title: str, report: TaskReport) -> Table:
    """A subset x metric table for the terminal, every rate in % with its 95% Wilson interval (a reading of accuracy
    equal to it everywhere left out, the caption naming it)."""
    variants = [r for r in report.rates if r.beside_accuracy and r.header]
    shown = [r for r in variants if any(row.get(r.key) != row.get("accuracy") for row in rows)]
    columns = [("accuracy", "accuracy %", ()), *((r.key, r.header, r.counted) for r in shown),
               *((key, header, ()) for key, header in CONSOLE_RATES),
               *((r.key, r.header, r.counted) for r in report.rates if r.header and not r.beside_accuracy)]
    captions = [f"n: {report.distinct}", *(f"{r.name}: {r.caption}" for r in report.rates
                                           if r.header and r.caption and (r in shown or not r.beside_accuracy)),
                *(f"{r.name}: equal to accuracy here, not shown" for r in variants if r not in shown)]
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                  caption="rates in % (95% Wilson interval); " + "; ".join(captions))
    # a narrower console wraps a rate under its interval, never cuts it
    table.add_column(report.level_column, justify="right", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    for _, header, _ in columns:
        table.add_column(header, justify="right", overflow="fold")
    table.add_column("mean\ntokens", justify="right", no_wrap=True)
    for row in rows:
        rates = (percent_text(row.get(key), trials(row, key, counted)) for key, _, counted in columns)
        label = row.get(report.level_column) if report.level_column in row else row_level(row)
        tokens = "-" if row.get("mean_tokens") is None else f"{row['mean_tokens']:.1f}"
        table.add_row(str(label), str(trials(row, "accuracy") or "-"), *rates, tokens)
    return table


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
        """Borrow the trainer's colocated vLLM engine, if it has one, when `eval.backend` is vllm or auto."""
        if self.settings.eval.backend in ("vllm", "auto"):
            self.colocated = ColocatedEngine.of(trainer)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.due(state.global_step, state.max_steps):
            self.validate(model, processing_class, state.global_step)

    def due(self, step: int, max_steps: int) -> bool:
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
