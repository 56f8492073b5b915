"""What a run prints: its size and folder at the start, a banner per stage, one line per step, its end.

transformers prints a ~40-key dict at every log step and a tqdm bar per stage; here the trainer's
console is the run's (`StageConsole` takes its place, `bind` removes transformers' printers): a
whole-run progress bar with an ETA while a stage trains (in a terminal), and per step one compact
line of the signals a person watches (reward, format, answer share, length, KL, zero-std share).
The full dict goes only to metrics.jsonl (`train.tracking.MetricsCallback`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from transformers import TrainerCallback
from transformers.trainer import DEFAULT_PROGRESS_CALLBACK  # tqdm's, or the notebook's in a notebook
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from core.checks import is_number
from core.report_command import report_command
from curriculum.plan import Stage
from train.eta import Estimate, RunTimer

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


def plural(count: int, noun: str) -> str:
    """
    >>> plural(1, "GRPO step"), plural(7, "stage start")
    ('1 GRPO step', '7 stage starts')
    """
    return f"{count} {noun}{'' if count == 1 else 's'}"


def eta_short(estimate: Estimate) -> str:
    """The time left in a few characters: "14 min", or "≥ 4 min" while work of some kind has not been timed yet (the
    GRPO steps while the SFT stage trains; `eta_detail` names it)."""
    return f"{'≥ ' if estimate.untimed else ''}{duration(estimate.seconds)}"


def eta_detail(estimate: Estimate) -> str:
    """What the ETA counts, part by part: "ETA 14 min: 7 GRPO steps x 52 s; 4 stage starts x 12 s; ..." """
    shown = [f"{plural(p.count, p.what)} " + ("untimed yet" if p.each is None else f"x {duration(p.each)}{p.note}")
             for p in estimate.parts if p.count]
    return f"ETA {eta_short(estimate)}: " + ("; ".join(shown) if shown else "nothing left")


class RunConsole:
    """The run's console: what it will do and where it writes at the start, its end, and a `StageConsole`
    per stage. `console` is rich's (a terminal gets the live bar; a log file gets the lines); `clock` times the
    run for its ETA (`train.eta.RunTimer`; a test hands in its own)."""

    def __init__(self, run_dir: Path, plan: Sequence[Stage], console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.run_dir, self.plan = run_dir, list(plan)
        self.console = console or Console()
        self.timer = RunTimer.of(self.plan, clock=clock)
        self.done_steps = 0  # over the whole run, for the live bar

    def expect_validations(self, completions: Mapping[int, int]) -> None:
        """The completions of each validation to come, by stage index (0: the baseline;
        `train.eta.planned_completions`)."""
        self.timer.completions = dict(completions)

    def validation_began(self, index: int) -> None:
        self.timer.validation_began(index)

    def validation_ended(self, index: int, cost: Mapping | None) -> None:
        """The validation after stage `index` is done; `cost`: what it cost (`eval.cost.validation_cost`)."""
        cost = cost or {}
        generating = float(cost.get("seconds") or 0.0) - float(cost.get("setup_seconds") or 0.0)
        self.timer.validation_ended(index, generating, int(cost.get("completions") or 0))

    def started(self, *, done_steps: int = 0) -> None:
        """The run's folder and the report command; `done_steps`: what a resumed run had trained before."""
        self.done_steps = done_steps
        self.console.print(f"[bold]run directory[/] {escape(str(self.run_dir))}", soft_wrap=True)
        self.console.print(f"report (any time): {escape(report_command(self.run_dir))}", soft_wrap=True)

    def finished(self, summary: str) -> None:
        self.console.print(f"[bold green]run done[/] {escape(summary)}", soft_wrap=True)
        self.console.print(f"run directory {escape(str(self.run_dir))}", soft_wrap=True)
        self.console.print(f"report: {escape(report_command(self.run_dir))}", soft_wrap=True)

    def stage(self, stage: Stage) -> StageConsole:
        return StageConsole(self, stage, len(self.plan))


def banner(stage: Stage, stages: int, steps: int, resumed_at: int = 0) -> str:
    """
    >>> from curriculum.plan import Stage
    >>> banner(Stage(3, "4ppl", "grpo", {"4ppl": 1.0}, steps=10, pool=9), 5, 10)
    'stage 3/5 · 4ppl · 10 steps'
    >>> banner(Stage(1, "sft", "sft", {"2ppl": 0.5, "3ppl": 0.5}, steps=16, pool=9), 6, 16, resumed_at=4)
    'stage 1/6 · sft · 2-3ppl · sft · 16 steps · resuming at step 4'
    >>> banner(Stage(4, "5ppl", "grpo", {"5ppl": 1.0}, steps=1, pool=9), 6, 1)
    'stage 4/6 · 5ppl · 1 step'
    """
    parts = [f"stage {stage.index}/{stages}", stage.name]
    if stage.name != stage.level_label:
        parts.append(stage.level_label)
    if not stage.kind_facts.default:
        parts.append(stage.kind)
    parts.append(plural(steps, "step"))
    if resumed_at:
        parts.append(f"resuming at step {resumed_at}")
    return " · ".join(parts)


class StageConsole(TrainerCallback):
    """One stage's banner, its step lines and the whole-run bar while it trains; in place of transformers'
    progress bar and log printer (`bind` removes those from the trainer)."""

    def __init__(self, run: RunConsole, stage: Stage, stages: int):
        self.run, self.stage, self.stages = run, stage, stages
        self.bar: Progress | None = None
        self.rerouted: list = []  # logging handlers sent through the bar's console while it runs

    def bind(self, trainer) -> None:
        """Take the trainer's console: its tqdm bar and dict printer go (this callback prints instead)."""
        for printer in (ProgressCallback, PrinterCallback, DEFAULT_PROGRESS_CALLBACK):
            trainer.remove_callback(printer)

    @property
    def console(self) -> Console:
        return self.bar.console if self.bar is not None else self.run.console

    def on_train_begin(self, args, state, control, **kwargs):
        timer = self.run.timer
        timer.training_began(self.stage.index, state.global_step)  # steps a resumed stage had trained before
        if not state.is_world_process_zero:  # with many processes, one console
            return
        self.run.console.rule(banner(self.stage, self.stages, state.max_steps, state.global_step))
        self.run.console.print(f"  {escape(eta_detail(timer.estimate()))}", soft_wrap=True, highlight=False)
        self.run.done_steps += state.global_step
        if self.run.console.is_terminal:  # a live bar only where it can redraw; a log file gets the lines
            self.bar = Progress(TextColumn("run"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[eta]}"),
                                console=self.run.console, transient=True)
            self.bar.add_task("run", total=sum(timer.steps.values()), completed=self.run.done_steps,
                              eta=f"ETA {eta_short(timer.estimate())}")
            self.bar.start()
            self.rerouted = route_logs(self.bar.console)

    def on_step_end(self, args, state, control, **kwargs):
        self.run.timer.step_ended()
        self.run.done_steps += 1
        if self.bar is not None:
            self.bar.update(self.bar.task_ids[0], completed=self.run.done_steps,
                            eta=f"ETA {eta_short(self.run.timer.estimate())}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs or not state.is_world_process_zero:  # the summary: metrics.jsonl's
            return
        # the whole run's ETA closes the line (the live bar, in a terminal, shows its steps)
        self.console.print(f"  {escape(self.stage.name)} {state.global_step}/{state.max_steps}  "
                           f"{escape(step_line(logs))}  ETA {escape(eta_short(self.run.timer.estimate()))}",
                           soft_wrap=True, highlight=False)

    def on_train_end(self, args, state, control, **kwargs):
        # a stage ended early (promotion, the guard) leaves its unused budget out of the whole run's
        self.run.timer.training_ended(min(state.global_step, state.max_steps))
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            restore_logs(self.rerouted)
            self.rerouted = []


def route_logs(console: Console) -> list[tuple[logging.StreamHandler, object]]:
    """Send every logging handler that writes to this process's stdout or stderr through `console` while its live
    bar runs, so a library's warning prints above the bar instead of inside it (rich redirects `sys.stdout` and
    `sys.stderr` for the bar, but a handler keeps the stream it was made with); returns (handler, its stream) to
    put back (`restore_logs`)."""
    terminal = {id(sys.__stdout__), id(sys.__stderr__), id(console.file)}
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    handlers = {id(h): h for lg in loggers for h in lg.handlers if type(h) is logging.StreamHandler}
    rerouted = [(h, h.stream) for h in handlers.values() if id(h.stream) in terminal]
    for handler, _ in rerouted:
        handler.setStream(_ConsoleLines(console))
    return rerouted


def restore_logs(rerouted: list[tuple[logging.StreamHandler, object]]) -> None:
    for handler, stream in rerouted:
        handler.setStream(stream)


class _ConsoleLines:
    """A stream for a logging handler: each line it writes printed by `console` (above a live bar)."""

    def __init__(self, console: Console):
        self.console, self.pending = console, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        pass
