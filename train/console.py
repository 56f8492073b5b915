"""What a run prints: its size and folder at the start, a banner per stage, one line per step, its end.

transformers prints a ~40-key dict at every log step and a tqdm bar per stage; here the trainer's
console is the run's (`StageConsole` takes its place, `bind` removes transformers' printers): a
whole-run progress bar with an ETA while a stage trains (in a terminal), and per step one compact
line of the signals a person watches (reward, format, answer share, length, KL, zero-std share).
The full dict goes only to metrics.jsonl (`train.tracking.MetricsCallback`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from transformers import TrainerCallback
from transformers.trainer import DEFAULT_PROGRESS_CALLBACK  # tqdm's, or the notebook's in a notebook
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from core.checks import is_number
from curriculum.plan import Stage

# (metrics key, label, format) of the compact step line, in the order a person reads them; absent keys are left out
STEP_FIELDS = (
    ("reward", "reward", "{:.3f}"),
    ("rewards/format_reward/mean", "format", "{:.2f}"),
    ("rewards/answer_reward/mean", "answer", "{:.2f}"),
    ("completions/mean_length", "len", "{:.0f}"),
    ("kl", "kl", "{:.2g}"),
    ("frac_reward_zero_std", "zero-std", "{:.2f}"),
    ("loss", "loss", "{:.3g}"),  # SFT's signal (GRPO's loss is ~0 by construction and says little)
    ("mean_token_accuracy", "token acc", "{:.2f}"),
)


def step_line(row: Mapping) -> str:
    """The compact line of one logged step.

    >>> step_line({"reward": 0.53125, "rewards/format_reward/mean": 0.75, "completions/mean_length": 128.4,
    ...            "kl": 0.00123, "frac_reward_zero_std": 0.25, "loss": 0.0, "learning_rate": 2e-5})
    'reward 0.531  format 0.75  len 128  kl 0.0012  zero-std 0.25'
    >>> step_line({"loss": 1.2345, "mean_token_accuracy": 0.5})
    'loss 1.23  token acc 0.50'
    """
    parts = []
    for key, label, form in STEP_FIELDS:
        if key == "loss" and "reward" in row:  # a GRPO step: its loss is left out
            continue
        if is_number(row.get(key), finite=True):
            parts.append(f"{label} {form.format(float(row[key]))}")
    return "  ".join(parts)


def duration(seconds: float) -> str:
    """
    >>> duration(42), duration(125), duration(3 * 3600 + 60 * 7)
    ('42 s', '2 min', '3 h 07 min')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


@dataclass
class RunProgress:
    """Steps trained over the whole run, and the seconds they took in this process (for the ETA)."""

    total: int  # the plan's step budgets; shrinks when a stage ends early
    done: int = 0
    timed_steps: int = 0
    step_seconds: float = 0.0

    def eta(self) -> str:
        """Time left for the training steps at this process's mean step time; validation comes on top."""
        if not self.timed_steps:
            return "?"
        return duration(self.step_seconds / self.timed_steps * max(self.total - self.done, 0))


class RunConsole:
    """The run's console: what it will do and where it writes at the start, its end, and a `StageConsole`
    per stage. `console` is rich's (a terminal gets the live bar; a log file gets the lines)."""

    def __init__(self, run_dir: Path, plan: Sequence[Stage], console: Console | None = None):
        self.run_dir, self.plan = run_dir, list(plan)
        self.console = console or Console()
        self.progress = RunProgress(total=sum(stage.steps for stage in self.plan))

    def started(self, *, done_steps: int = 0) -> None:
        """The run's folder and the report command; `done_steps`: what a resumed run had trained before."""
        self.progress.done = done_steps
        self.console.print(f"[bold]run directory[/] {escape(str(self.run_dir))}", soft_wrap=True)
        self.console.print(f"report (any time): {escape(report_command(self.run_dir))}", soft_wrap=True)

    def finished(self, summary: str) -> None:
        self.console.print(f"[bold green]run done[/] {escape(summary)}", soft_wrap=True)
        self.console.print(f"run directory {escape(str(self.run_dir))}", soft_wrap=True)
        self.console.print(f"report: {escape(report_command(self.run_dir))}", soft_wrap=True)

    def stage(self, stage: Stage) -> StageConsole:
        return StageConsole(self, stage, len(self.plan))


def report_command(run_dir: Path) -> str:
    """
    >>> report_command(Path("outputs/runs/x"))
    'make report RUN=outputs/runs/x'
    """
    return f"make report RUN={run_dir}"


def banner(stage: Stage, stages: int, steps: int, resumed_at: int = 0) -> str:
    """
    >>> from curriculum.plan import Stage
    >>> banner(Stage(3, "4ppl", "grpo", {"4ppl": 1.0}, steps=10, pool=9), 5, 10)
    'stage 3/5 · 4ppl · 10 steps'
    >>> banner(Stage(1, "sft", "sft", {"2ppl": 0.5, "3ppl": 0.5}, steps=16, pool=9), 6, 16, resumed_at=4)
    'stage 1/6 · sft · 2-3ppl · sft · 16 steps · resuming at step 4'
    """
    parts = [f"stage {stage.index}/{stages}", stage.name]
    if stage.name != stage.level_label:
        parts.append(stage.level_label)
    if not stage.kind_facts.default:
        parts.append(stage.kind)
    parts.append(f"{steps} steps")
    if resumed_at:
        parts.append(f"resuming at step {resumed_at}")
    return " · ".join(parts)


class StageConsole(TrainerCallback):
    """One stage's banner, its step lines and the whole-run bar while it trains; in place of transformers'
    progress bar and log printer (`bind` removes those from the trainer)."""

    def __init__(self, run: RunConsole, stage: Stage, stages: int):
        self.run, self.stage, self.stages = run, stage, stages
        self.bar: Progress | None = None
        self.step_began: float | None = None

    def bind(self, trainer) -> None:
        """Take the trainer's console: its tqdm bar and dict printer go (this callback prints instead)."""
        for printer in (ProgressCallback, PrinterCallback, DEFAULT_PROGRESS_CALLBACK):
            trainer.remove_callback(printer)

    @property
    def console(self) -> Console:
        return self.bar.console if self.bar is not None else self.run.console

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:  # with many processes, one console
            return
        self.run.console.rule(banner(self.stage, self.stages, state.max_steps, state.global_step))
        self.run.progress.done += state.global_step  # steps a resumed stage had trained before
        if self.run.console.is_terminal:  # a live bar only where it can redraw; a log file gets the lines
            self.bar = Progress(TextColumn("run"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[eta]}"),
                                console=self.run.console, transient=True)
            self.bar.add_task("run", total=self.run.progress.total, completed=self.run.progress.done,
                              eta=f"ETA {self.run.progress.eta()}")
            self.bar.start()

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        progress = self.run.progress
        progress.done += 1
        if self.step_began is not None:
            progress.timed_steps += 1
            progress.step_seconds += time.perf_counter() - self.step_began
        if self.bar is not None:
            self.bar.update(self.bar.task_ids[0], completed=progress.done, eta=f"ETA {progress.eta()}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs or not state.is_world_process_zero:  # the summary: metrics.jsonl's
            return
        # the whole run's ETA closes the line (the live bar, in a terminal, shows its steps)
        self.console.print(f"  {escape(self.stage.name)} {state.global_step}/{state.max_steps}  "
                           f"{escape(step_line(logs))}  ETA {self.run.progress.eta()}", soft_wrap=True,
                           highlight=False)

    def on_train_end(self, args, state, control, **kwargs):
        # a stage ended early (promotion, the guard) leaves its unused budget out of the whole run's total
        self.run.progress.total -= max(state.max_steps - state.global_step, 0)
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
