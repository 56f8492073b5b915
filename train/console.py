"""What a run prints: its size and folder at the start, a banner per stage, one compact line per step (in place of
transformers' ~40-key dict, which goes to metrics.jsonl only), a whole-run bar with an ETA in a terminal, its end.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from transformers import TrainerCallback
from transformers.trainer import DEFAULT_PROGRESS_CALLBACK  # tqdm's, or the notebook's in a notebook
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from core.checks import is_number
from core.rundir.files import report_command
from curriculum.plan import Stage
from train.eta import Estimate, RunTimer

# (metrics key, label, short label, format) of the step line, in reading order (reward components after the total)
TOTAL_FIELD = ("reward", "reward", "rew", "{:.3f}")
STEP_FIELDS = (
    ("completions/mean_length", "len", "len", "{:.0f}"),
    ("kl", "kl", "kl", "{:.2g}"),
    ("frac_reward_zero_std", "zero-std", "0-std", "{:.2f}"),
    ("loss", "loss", "loss", "{:.3g}"),  # SFT's signal (GRPO's loss is ~0 by construction and says little)
    ("mean_token_accuracy", "token acc", "tok acc", "{:.2f}"),
)
# The columns a step line fits in: a terminal's default, where a longer line wraps into two.
WIDTH = 80


def component_fields(rewards: Sequence[Mapping] | None) -> tuple:
    """The step line's fields of the reward stack's components, in TRL's order, with short labels.

    >>> component_fields([{"name": "format", "weight": 0.5, "source": "reward.weights"}])
    (('rewards/format/mean', 'format', 'form', '{:.2f}'),)
    >>> [short for _, _, short, _ in component_fields([{"name": n} for n in ("low_tokens", "strict_format", "kl")])]
    ['lowt', 'strf', 'kl']
    """
    names = [str(c.get("name")) for c in rewards or () if isinstance(c, Mapping)]
    shorts = []
    for name in names:
        first, *rest = name.split("_")
        shorts.append(first[:3] + rest[0][:1] if rest else first[:4])
    return tuple((f"rewards/{n}/mean", n, s if shorts.count(s) == 1 else n, "{:.2f}")
                 for n, s in zip(names, shorts, strict=True))


def reward_formula(rewards: Sequence[Mapping] | None) -> str:
    """The reward as TRL sums it from the stack, and the components logged at weight 0.

    >>> reward_formula([{"name": "format", "weight": 0.5}, {"name": "answer", "weight": 0.0},
    ...                 {"name": "low_tokens", "weight": 1.0}])
    'reward = 0.5 format + 1 low_tokens; logged at weight 0: answer'
    """
    stack = [c for c in rewards or () if isinstance(c, Mapping) and is_number(c.get("weight"))]
    weighted = " + ".join(f"{float(c['weight']):g} {c.get('name')}" for c in stack if c["weight"])
    logged = ", ".join(str(c.get("name")) for c in stack if not c["weight"])
    return f"reward = {weighted or '0'}" + (f"; logged at weight 0: {logged}" if logged else "")


def step_metrics(row: Mapping, fields: Sequence[tuple], short: bool = False) -> list[str]:
    """The "<label> <value>" parts of one logged step for these `fields` (`short`: the short labels).

    >>> step_metrics({"reward": 0.53125, "rewards/format/mean": 0.75, "completions/mean_length": 128.4,
    ...               "kl": 0.00123, "frac_reward_zero_std": 0.25, "loss": 0.0, "learning_rate": 2e-5},
    ...              (TOTAL_FIELD, *component_fields([{"name": "format"}, {"name": "answer"}]), *STEP_FIELDS))
    ['reward 0.531', 'format 0.75', 'len 128', 'kl 0.0012', 'zero-std 0.25']
    >>> step_metrics({"loss": 1.2345, "mean_token_accuracy": 0.5}, STEP_FIELDS, short=True)
    ['loss 1.23', 'tok acc 0.50']
    """
    parts = []
    for key, label, short_label, form in fields:
        if key == "loss" and "reward" in row:  # a GRPO step: its loss is left out
            continue
        if is_number(row.get(key), finite=True):
            parts.append(f"{short_label if short else label} {form.format(float(row[key]))}")
    return parts


def step_line(row: Mapping, stage: str, step: str, eta: Estimate | None = None, components: tuple = ()) -> str:
    """The line of one logged step, within WIDTH where it can be (long labels, else short ones, else without the
    stage's name); reward components that fit none of these take a second line.

    >>> from train.eta import Part
    >>> eta = Estimate([Part("GRPO step", 1, 3 * 3600 + 420.0)])
    >>> step_line({"reward": 0.53, "completions/mean_length": 128, "kl": 0.001}, "2ppl", "3/10", eta)
    '  2ppl 3/10  reward 0.530  len 128  kl 0.001  ETA 3 h 07 min'
    >>> kk = component_fields([{"name": "format"}, {"name": "answer"}])
    >>> grpo = {"reward": -0.03125, "rewards/format/mean": 0.75, "rewards/answer/mean": 0.0,
    ...         "completions/mean_length": 512, "kl": 0.00123, "frac_reward_zero_std": 0.25}
    >>> step_line({**grpo, "completions/mean_length": 64}, "3ppl", "5/20", eta, kk)
    '  3ppl 5/20 rew -0.031 form 0.75 answ 0.00 len 64 kl 0.0012 0-std 0.25 ETA 3h07m'
    >>> step_line(grpo, "3ppl", "150/200", eta, kk)
    '  150/200 rew -0.031 form 0.75 answ 0.00 len 512 kl 0.0012 0-std 0.25 ETA 3h07m'
    >>> four = kk + component_fields([{"name": "overlong"}, {"name": "low_tokens"}])
    >>> print(step_line({**grpo, "rewards/overlong/mean": -0.01, "rewards/low_tokens/mean": 0.5}, "3ppl", "1/2", eta,
    ...                 four))
      3ppl 1/2  reward -0.031  len 512  kl 0.0012  zero-std 0.25  ETA 3 h 07 min
        format 0.75  answer 0.00  overlong -0.01  low_tokens 0.50
    """
    forms = _forms(row, stage, step, eta, components)
    one = next((line for line in forms if len(line) + 2 <= WIDTH), None)
    if one is not None or not components:
        return "  " + (one or forms[-1])
    bare = _forms(row, stage, step, eta, ())
    first = next((line for line in bare if len(line) + 2 <= WIDTH), bare[-1])
    second = ["  ".join(step_metrics(row, components)), " ".join(step_metrics(row, components, short=True))]
    return f"  {first}\n    {next((line for line in second if len(line) + 4 <= WIDTH), second[-1])}"


def _forms(row: Mapping, stage: str, step: str, eta: Estimate | None, components: tuple) -> list[str]:
    """The step line's forms, longest first (unindented)."""
    long_eta = [f"ETA {eta_short(eta)}"] if eta is not None else []
    short_eta = [f"ETA {eta_short(eta, compact=True)}"] if eta is not None else []
    fields = (TOTAL_FIELD, *components, *STEP_FIELDS)
    short = step_metrics(row, fields, short=True)
    return [
        "  ".join([f"{stage} {step}", *step_metrics(row, fields), *long_eta]),
        " ".join([stage, step, *short, *short_eta]),
        " ".join([step, *short, *short_eta]),
    ]


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


def eta_short(estimate: Estimate, *, compact: bool = False) -> str:
    """The time left in a few characters: "14 min", or "≥ 4 min" while some work is untimed; `compact`: "≥4m".

    >>> from train.eta import Part
    >>> [eta_short(Estimate([Part("step", 1, s)]), compact=True) for s in (42, 125, 3 * 3600 + 60 * 7)]
    ['42s', '2m', '3h07m']
    """
    if compact:
        shown = duration(estimate.seconds).replace(" min", "m").replace(" h ", "h").replace(" s", "s")
        return f"{'≥' if estimate.untimed else ''}{shown}"
    return f"{'≥ ' if estimate.untimed else ''}{duration(estimate.seconds)}"


def eta_detail(estimate: Estimate) -> str:
    """What the ETA counts, part by part: "ETA 14 min: 7 GRPO steps x 52 s; 4 stage starts x 12 s; ..." """
    shown = [f"{plural(p.count, p.what)} " + ("untimed yet" if p.each is None else f"x {duration(p.each)}{p.note}")
             for p in estimate.parts if p.count]
    return f"ETA {eta_short(estimate)}: " + ("; ".join(shown) if shown else "nothing left")


class RunConsole:
    """The run's console: its start, its end, and a `StageConsole` per stage; its ETA counts `completions`."""

    def __init__(self, run_dir: Path, plan: Sequence[Stage], console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic, level_word: str = "level",
                 rewards: Sequence[Mapping] | None = None, completions: Mapping[int, int] | None = None):
        self.run_dir, self.plan, self.level_word = run_dir, list(plan), level_word
        self.rewards = rewards  # the reward stack as run.json records it (`reward_stack`)
        self.console = console or Console()
        self.timer = RunTimer({s.index: s.kind_facts.label for s in self.plan}, {s.index: s.steps for s in self.plan},
                              dict(completions or {}), clock)
        self.done_steps = 0  # over the whole run, for the live bar

    def started(self, *, done_steps: int = 0, earlier_rows: Iterable[Mapping] = ()) -> None:
        """The run's folder and the report command; a resumed run's `done_steps` and step rows seed the ETA."""
        self.done_steps = done_steps
        self.timer.remember_steps(earlier_rows)
        self.console.print(f"[bold]run directory[/] {escape(str(self.run_dir))}", soft_wrap=True)
        self.console.print(f"report (any time): {escape(report_command(self.run_dir))}", soft_wrap=True)

    def finished(self, summary: str, sync: Path | None = None) -> None:
        """The run's last lines; `sync`: its offline wandb folder, the one that holds the whole run."""
        self.console.print(f"[bold green]run done[/] {escape(summary)}", soft_wrap=True)
        self.console.print(f"run directory {escape(str(self.run_dir))}", soft_wrap=True)
        if sync is not None:
            self.console.print(f"wandb (offline), the whole run: {escape(f'wandb sync {sync}')}", soft_wrap=True)
        self.console.print(f"report: {escape(report_command(self.run_dir))}", soft_wrap=True)


def banner(stage: Stage, stages: int, steps: int, resumed_at: int = 0, level_word: str = "level") -> str:
    """The stage's rule: its place, name, levels, kind where not the default, and its steps.

    >>> from curriculum.plan import Stage
    >>> banner(Stage(3, "4ppl", "grpo", {"4ppl": 1.0}, steps=10, pool=9), 5, 10, level_word="")
    'stage 3/5 · 4ppl · 10 steps'
    >>> banner(Stage(1, "sft", "sft", {"2ppl": 0.5, "3ppl": 0.5}, steps=16, pool=9), 6, 16, resumed_at=4, level_word="")
    'stage 1/6 · sft · 2-3ppl · sft · 16 steps · resuming at step 4'
    >>> banner(Stage(1, "2steps", "grpo", {"2steps": 1.0}, steps=2, pool=9), 5, 2)
    'stage 1/5 · level 2steps · 2 steps'
    >>> banner(Stage(2, "warm", "grpo", {"2steps": 1.0}, steps=1, pool=9), 5, 1)
    'stage 2/5 · warm · level 2steps · 1 step'
    """
    levels = " ".join(word for word in (level_word, stage.level_label) if word)
    parts = [f"stage {stage.index}/{stages}"]
    parts += [levels] if stage.name == stage.level_label else [stage.name, levels]
    if not stage.kind_facts.default:
        parts.append(stage.kind)
    parts.append(plural(steps, "step"))
    if resumed_at:
        parts.append(f"resuming at step {resumed_at}")
    return " · ".join(parts)


@dataclass(eq=False)  # compared as itself, as the trainer's list of callbacks holds it
class StageConsole(TrainerCallback):
    """One stage's banner, step lines and the whole-run bar, in place of transformers' bar and printer."""

    run: RunConsole
    stage: Stage
    bar: Progress | None = None
    rerouted: list = field(default_factory=list)  # logging handlers sent through the bar's console while it runs

    def bind(self, trainer) -> None:
        """Take the trainer's console: its tqdm bar and dict printer go (this callback prints instead)."""
        for printer in (ProgressCallback, PrinterCallback, DEFAULT_PROGRESS_CALLBACK):
            trainer.remove_callback(printer)

    def on_train_begin(self, args, state, control, **kwargs):
        timer = self.run.timer
        timer.training_began(self.stage.index, state.global_step)  # steps a resumed stage had trained before
        if not state.is_world_process_zero:  # with many processes, one console
            return
        self.run.console.rule(banner(self.stage, len(self.run.plan), state.max_steps, state.global_step,
                                     self.run.level_word))
        if self.stage.kind_facts.learns_from_rewards and self.run.rewards:
            self.run.console.print(f"  {escape(reward_formula(self.run.rewards))}", soft_wrap=True, highlight=False)
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
        line = step_line(logs, self.stage.name, f"{state.global_step}/{state.max_steps}", self.run.timer.estimate(),
                         component_fields(self.run.rewards))
        console = self.bar.console if self.bar is not None else self.run.console
        console.print(escape(line), soft_wrap=True, highlight=False)

    def on_train_end(self, args, state, control, **kwargs):
        # a stage ended early (promotion, the guard) leaves its unused budget out of the whole run's
        self.run.timer.training_ended(min(state.global_step, state.max_steps))
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            restore_logs(self.rerouted)
            self.rerouted = []


def route_logs(console: Console) -> list[tuple[logging.StreamHandler, object]]:
    """Send every logging handler writing to stdout or stderr through `console` while its bar runs (a handler keeps
    the stream it was made with, which rich's redirect misses); returns (handler, stream) to put back."""
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
