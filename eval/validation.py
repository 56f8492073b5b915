"""Validation of one checkpoint on every subset, with the reward's grader (one grader).

Writes one row per subset (a task's level) to `validation.jsonl` ({stage, stage_name, global_step, level,
K&K's ppl, metrics, cost}), every completion with its grade to `samples/<stage>/<level>.jsonl` (so a person can read
what the model wrote, and a recount can check the metrics), and prints a rich table. One generator
serves all the subsets: the model loaded once (hf), or one vLLM engine started once and released
after (vllm; `auto` takes it where vLLM can validate the model); `cost` says what each subset's generation
took (`eval.cost.validation_cost` sums them).

With many processes every rank loads the checkpoint on its own device and generates its share of
the batches (`eval.generation`); every rank grades all the gathered completions (the same rows
everywhere, so every rank decides alike), and the main process alone writes rows, samples, the
tracker and the table. vLLM validates on one GPU: many processes validate through HF.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from transformers import AutoTokenizer

from core.distributed import SINGLE, Processes
from core.models import load_for_inference
from core.rundir import level_fields, row_level, samples_file
from core.stats import percent_text
from curriculum.tasks.base import Task, TaskRecord
from curriculum.tasks.kk.grading.grader import grade
from curriculum.tasks.kk.grading.lenient import lenient_grade
from curriculum.tasks.kk.grading.reasoning import check_reasoning
from eval.generation import HfEngine
from eval.metrics import METRIC_COLUMNS, Scored, subset_metrics, trials
from eval.settings import ValidationSettings
from eval.vllm_backend import fresh_engine, validation_backend


def grade_subset(records: list[TaskRecord], completions, fmt: str, task: Task) -> tuple[list[Scored], list[dict]]:
    """Grade every completion of a subset; returns the scores and the sample rows to save. K&K's are graded
    with the reward's grader and its reasoning checks; any other task's by its own `grade`."""
    if task.name != "kk":
        return _grade_answers(records, completions, task)
    scored, samples = [], []
    for task_record, outs in zip(records, completions, strict=True):
        puzzle, record = task_record.id, task_record.source
        for k, out in enumerate(outs):
            g = grade(out.text, record["names"], record["solution"], fmt=fmt)
            r = check_reasoning(out.text, record["names"], g.assignment, fmt)
            lenient = lenient_grade(out.text, record["names"], record["solution"], g)
            invented = sorted({*r.invented, *g.invented})
            scored.append(Scored(puzzle, g.correct, g.n_right, len(record["names"]), g.format_ok, g.answered,
                                 out.tokens, out.truncated, r.has_reasoning, r.agrees, bool(invented), lenient.correct,
                                 r.settles))
            samples.append({
                "id": puzzle, "sample": k, "completion": out.text, "tokens": out.tokens,
                "truncated": out.truncated, "correct": g.correct, "format_ok": g.format_ok,
                "answered": g.answered, "n_right": g.n_right, "n_people": len(record["names"]),
                "assignment": g.assignment, "reasons": list(g.reasons),
                "solution": list(record["solution"]), "names": list(record["names"]),
                "has_reasoning": r.has_reasoning, "reasoning_claims": r.settled, "reasoning_settles": r.settles,
                "reasoning_agrees": r.agrees,
                "invented": invented, "lenient_correct": lenient.correct, "lenient_assignment": lenient.assignment,
                "lenient_reason": lenient.reason,
            })
    return scored, samples


def _grade_answers(records: list[TaskRecord], completions, task: Task) -> tuple[list[Scored], list[dict]]:
    """A task with one answer per record (GSM8K, reasoning-gym): right, formatted, answered; no people, so
    person accuracy and the reasoning checks stay empty (None in the row). Lenient accuracy is strict's."""
    scored, samples = [], []
    for record, outs in zip(records, completions, strict=True):
        for k, out in enumerate(outs):
            g = task.grade(out.text, record.columns)
            scored.append(Scored(record.id, g.correct, int(g.correct), 0, g.format_ok, g.answered, out.tokens,
                                 out.truncated, lenient_correct=g.correct))
            samples.append({
                "id": record.id, "sample": k, "completion": out.text, "tokens": out.tokens,
                "truncated": out.truncated, "correct": g.correct, "format_ok": g.format_ok, "answered": g.answered,
                "answer": getattr(g, "answer", None), "reference": record.columns.get("answer"),
                "reasons": list(g.reasons), "lenient_correct": g.correct,
            })
    return scored, samples


def validate(settings: ValidationSettings, model_path: str, pools: Mapping[str, list[TaskRecord]], *, tag: dict,
             out_dir: Path, writer=None, tracker=None, console: Console | None = None,
             processes: Processes = SINGLE) -> list[dict]:
    """Generate, grade and record every subset in `pools` for the checkpoint at `model_path`.

    `tag` (stage, stage_name, global_step) prefixes every row; each subset's row goes to `writer` (a
    JsonlWriter) as soon as it is graded, so an interrupt keeps the subsets done. Returns the rows (on every
    rank of many `processes`; the main process records them: rows, samples, tracker, console).
    """
    s, rows = settings, []
    generation = {"max_new_tokens": s.max_new_tokens, "temperature": s.temperature, "samples": s.samples,
                  "chat_kwargs": dict(s.chat_kwargs), "seed": s.seed}
    step, console = int(tag.get("global_step", 0)), console or wide_console()
    record = processes.is_main
    with validation_engine(s, model_path, processes) as engine:
        levels = list(pools)  # in the task's order, easiest first
        for i, level in enumerate(levels):
            records = pools[level]
            label = f"validating {tag.get('stage_name')} {level}"
            completions, cost = engine.generate(s.prompts(records), label=label, **generation)
            scored, samples = grade_subset(records, completions, s.fmt, s.task)
            if record:
                _write_samples(samples_file(out_dir, level), samples)
            rows.append({**tag, **level_fields(level), **subset_metrics(scored), "cost": cost.as_dict()})
            if not record:
                continue
            if writer is not None:
                writer.write(rows[-1:])
            if tracker is not None:
                tracker.table(f"val/{level}/samples", [sample_cells(tag, level, sample) for sample in samples], step)
            console.print(progress_line(rows, [len(pools[later]) * s.samples for later in levels[i + 1:]]),
                          highlight=False)
    if tracker is not None and record:
        for row in rows:  # `stage` beside: validation panels are drawn over the stage (train/tracking.py)
            tracker.log({"stage": tag.get("stage"),
                         **{f"val/{row['level']}/{k}": row[k] for k in METRIC_COLUMNS if row[k] is not None}},
                        step=step)
    if record:
        console.print(results_table(rows, title=f"validation after {tag.get('stage_name')}"))
    return rows


def wide_console() -> Console:
    """rich's console, 100 columns wide where it is not a terminal (a log file, a pipe: rich would take 80 and
    wrap the rates under their intervals); a terminal keeps its own width."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = max(console.width, 100)
    return console


def progress_line(rows: list[dict], left: list[int]) -> str:
    """A subset done: its completions and seconds, and the time left at the rate so far (a longer subset,
    more people, writes longer completions: a floor more than a forecast).

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


def sample_cells(tag: Mapping, level: str, sample: Mapping) -> dict:
    """One graded completion as a tracker table row: what a person filters on, then the text."""
    keys = ("id", "correct", "lenient_correct", "format_ok", "tokens", "truncated", "reasoning_agrees", "invented")
    return {"stage": tag.get("stage_name"), "level": level, **{k: sample.get(k) for k in keys},
            "completion": sample.get("completion")}


@contextmanager
def validation_engine(settings: ValidationSettings, model_path: str, processes: Processes = SINGLE) -> Iterator:
    """What generates one validation: a fresh vLLM engine (`eval.backend=vllm`, or `auto` where vLLM can:
    `eval.vllm_backend.validation_backend`), else the model loaded for HF on this process's own device."""
    if validation_backend(settings.backend, model_path, processes) == "vllm":  # vLLM loads the weights itself
        with fresh_engine(model_path, AutoTokenizer.from_pretrained(model_path), seed=settings.seed,
                          gpu_memory_utilization=settings.vllm_gpu_memory_utilization) as engine:
            yield engine
        return
    began = time.perf_counter()
    model, tokenizer = load_for_inference(model_path, processes.device())
    yield HfEngine(model, tokenizer, batch_size=settings.batch_size, setup_seconds=time.perf_counter() - began,
                   processes=processes)


def _write_samples(path: Path, samples: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(s) + "\n" for s in samples))
    tmp.replace(path)


# (validation row key, console header): the rates a person reads first, each in % with its interval.
CONSOLE_RATES = (("accuracy", "accuracy %"), ("lenient_accuracy", "lenient %"), ("format_rate", "format %"),
                 ("truncation_rate", "truncated %"), ("reasoning_agrees_rate", "reasoning\nagrees %"),
                 ("reasoning_settles_nobody", "settles\nnobody %"),
                 ("invented_name_rate", "invented\nname %"))


# K&K's rates that read the reasoning and the people named: a task without people (GSM8K) has none.
PEOPLE_RATES = ("reasoning_agrees_rate", "reasoning_settles_nobody", "invented_name_rate")


def results_table(rows: list[dict], title: str) -> Table:
    """A subset x metric table for the terminal, readable at 100 columns: every rate in % with its
    95% Wilson interval, n the distinct puzzles it counts (every metric is in validation.jsonl). The
    lenient column is left out where it equals strict accuracy in every row (the caption says so)."""
    lenient_differs = any(row.get("lenient_accuracy") != row.get("accuracy") for row in rows)
    # K&K's subsets by their people count, as the table always showed them (and one line a subset at 100 columns)
    by_people = all(isinstance(row.get("ppl"), int) for row in rows)
    shown = [(k, header) for k, header in CONSOLE_RATES if (k != "lenient_accuracy" or lenient_differs)
             and (by_people or k not in PEOPLE_RATES)]  # a task without people has no reasoning or name checks
    lenient = "an untagged final answer counts" if lenient_differs else "equal to accuracy here, not shown"
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False,
                  caption="rates in % (95% Wilson interval); " + (
                      "n: distinct puzzles; reasoning agrees: of those whose reasoning settles someone; settles "
                      f"nobody: of those with reasoning; lenient: {lenient}" if by_people else "n: distinct problems"))
    # At 100 columns a row is one line; a narrower console wraps a rate under its interval, never cuts it.
    table.add_column("ppl" if by_people else "level", justify="right", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    for _, header in shown:
        table.add_column(header, justify="right", overflow="fold")
    table.add_column("mean\ntokens", justify="right", no_wrap=True)
    for row in rows:
        rates = (percent_text(row.get(k), trials(row, k)) for k, _ in shown)
        label = row["ppl"] if by_people else row_level(row)
        table.add_row(str(label), str(trials(row, "accuracy") or "-"), *rates, _tokens(row.get("mean_tokens")))
    return table


def _tokens(value) -> str:
    return "-" if value is None else f"{value:.1f}"
