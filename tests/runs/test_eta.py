"""The run's ETA, driven through the console's own callbacks on a fake clock: it counts each kind's steps at that
kind's measured time, the stages' starts and saves, and the validations to come by their completions; work of a
kind not timed yet is named, not guessed. And a library's warning prints above the live bar, not inside it."""

from __future__ import annotations

import io
import logging

from rich.console import Console
from transformers import TrainerControl, TrainerState, TrainingArguments

from curriculum.plan import Stage
from train.console import RunConsole, StageConsole
from train.eta import RunTimer

PLAN = [Stage(1, "sft", "sft", {"2ppl": 0.5, "3ppl": 0.5}, steps=4, pool=8),
        Stage(2, "2ppl", "grpo", {"2ppl": 1.0}, steps=3, pool=8),
        Stage(3, "3ppl", "grpo", {"3ppl": 1.0}, steps=1, pool=8)]
# seconds each piece of work takes in this fake run: an SFT step is 4x cheaper than a GRPO step
SFT_STEP, GRPO_STEP, START, SAVE, ENGINE, PER_COMPLETION, COMPLETIONS = 5.0, 20.0, 12.0, 6.0, 4.0, 2.0, 8


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def validate(run: RunConsole, clock: Clock, index: int) -> None:
    """A validation as the runner times it: its wall time is the engine's start plus its generation."""
    run.timer.validation_began(index)
    clock.now += ENGINE + PER_COMPLETION * COMPLETIONS
    run.timer.validation_ended(index, {"seconds": ENGINE + PER_COMPLETION * COMPLETIONS, "setup_seconds": ENGINE,
                                       "completions": COMPLETIONS})


def train(run: RunConsole, clock: Clock, stage: Stage, step_seconds: float, etas: list[tuple[float, str]]) -> None:
    """One stage through its StageConsole's callbacks; the ETA after each step, at the time it was given."""
    callback, state = StageConsole(run, stage), TrainerState(max_steps=stage.steps)
    args, control = TrainingArguments(output_dir="unused", report_to=[]), TrainerControl()
    clock.now += START
    callback.on_train_begin(args, state, control)
    for _ in range(stage.steps):
        clock.now += step_seconds
        state.global_step += 1
        callback.on_step_end(args, state, control)
        etas.append((clock.now, run.timer.estimate()))
        callback.on_log(args, state, control, logs={"loss": 1.0})
    callback.on_train_end(args, state, control)
    clock.now += SAVE


def test_the_eta_counts_each_kinds_steps_the_stage_starts_and_saves_and_the_validations_to_come(tmp_path):
    clock, out = Clock(), io.StringIO()
    run = RunConsole(tmp_path, PLAN, Console(file=out, width=200), clock=clock,
                     completions=dict.fromkeys(range(4), COMPLETIONS))
    etas: list = []
    validate(run, clock, 0)
    for stage, step in zip(PLAN, (SFT_STEP, GRPO_STEP, GRPO_STEP), strict=True):
        train(run, clock, stage, step, etas)
        validate(run, clock, stage.index)
    end = clock.now
    # while the SFT stage trains, the GRPO steps have no time yet: named, not guessed
    during_sft = etas[0][1]
    assert [(p.what, p.count) for p in during_sft.untimed] == [("GRPO step", 4), ("stage save", 3)]
    # from the end of the first GRPO step on, each step's ETA is the time truly left (every piece took its mean)
    for at, estimate in etas[4:]:
        assert not estimate.untimed and abs(at + estimate.seconds - end) < 1e-6, (at, estimate.parts)
    printed = out.getvalue()
    # what it counts, said at each stage's start; the step lines end with the ETA
    assert ("  ETA ≥ 84 s: 4 SFT steps untimed yet; 4 GRPO steps untimed yet; 2 stage starts x 12 s; 3 stage saves "
            "untimed yet; 3 validations x 20 s (24 completions at 2.00 s, 4 s start and grading each)\n") in printed
    assert ("  ETA 46 s: 1 GRPO step x 20 s; 1 stage save x 6 s; 1 validation x 20 s (8 completions at 2.00 s, 4 s "
            "start and grading each)\n") in printed
    assert "  sft 4/4  loss 1  ETA ≥ 84 s\n" in printed and "  2ppl 1/3  loss 1  ETA 2 min\n" in printed
    assert "  3ppl 1/1  loss 1  ETA 26 s\n" in printed  # the save and the validation after the last step


def test_the_eta_follows_a_policy_whose_completions_shorten_as_it_learns():
    """GRPO steps and validations get cheaper as the policy's completions shorten (the demo's halved): the ETA
    counts a kind's last few steps and the latest validation's rate, not whole-run means that remember the start."""
    clock = Clock()
    # two GRPO stages of 6 and 2 steps
    timer = RunTimer({1: "GRPO", 2: "GRPO"}, {1: 6, 2: 2}, {0: COMPLETIONS, 1: COMPLETIONS, 2: COMPLETIONS}, clock)
    timer.validation_began(0)
    clock.now += ENGINE + 4.0 * COMPLETIONS  # the baseline: 4 s a completion
    timer.validation_ended(0, {"seconds": 4.0 * COMPLETIONS, "completions": COMPLETIONS})
    timer.training_began(1)
    for seconds in (50.0, 40.0, 30.0, 20.0):
        clock.now += seconds
        timer.step_ended()
    parts = {p.what: (p.count, p.each) for p in timer.estimate().parts}
    assert parts["GRPO step"] == (4, 30.0)  # 2 left here, 2 in the next stage, each at the last 3's mean (not 35)
    clock.now += 20.0 + 20.0
    timer.step_ended(), timer.step_ended()
    timer.training_ended(6)
    clock.now += SAVE
    timer.validation_began(1)
    clock.now += ENGINE + 1.0 * COMPLETIONS  # the trained policy answers 4x faster than the baseline did
    timer.validation_ended(1, {"seconds": 1.0 * COMPLETIONS, "completions": COMPLETIONS})
    parts = {p.what: (p.count, p.each) for p in timer.estimate().parts}
    assert parts["GRPO step"] == (2, 20.0) and parts["stage save"] == (1, SAVE)
    assert parts["validation"] == (1, ENGINE + 1.0 * COMPLETIONS)  # at the latest rate: 12 s, where the mean says 24


def test_a_resumed_run_times_its_steps_from_the_ones_it_measured_before(tmp_path):
    """A run resumed in stage 2 has no step of this attempt timed yet: its ETA takes the GRPO and SFT step times its
    metrics.jsonl recorded (TRL's step_time), where without them every step would be 'untimed yet' (`≥ 0 s`)."""
    earlier = [{"stage": 1, "step_time": SFT_STEP}] * 4 + [{"stage": 2, "step_time": GRPO_STEP}]
    estimates = {}
    for name, rows in (("with", earlier), ("without", [])):
        run = RunConsole(tmp_path, PLAN, Console(file=io.StringIO(), width=200), clock=Clock())
        run.started(done_steps=5, earlier_rows=rows)
        run.timer.training_began(2, done_steps=1)
        estimates[name] = {p.what: (p.count, p.each) for p in run.timer.estimate().parts}
    assert estimates["with"]["GRPO step"] == (3, GRPO_STEP)  # 2 left in stage 2, 1 in stage 3
    assert estimates["without"]["GRPO step"] == (3, None), "the control: nothing timed, nothing known"


def test_a_library_warning_prints_above_the_live_bar_not_inside_it(tmp_path):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)  # a terminal: the live bar runs
    library = logging.getLogger("transformers.somewhere")
    handler = logging.StreamHandler(out)  # made before the bar, as a library's handler is
    library.addHandler(handler)
    try:
        run = RunConsole(tmp_path, PLAN[:1], console, clock=Clock())
        callback, state = StageConsole(run, PLAN[0]), TrainerState(max_steps=4)
        args, control = TrainingArguments(output_dir="unused", report_to=[]), TrainerControl()
        callback.on_train_begin(args, state, control)
        callback.on_step_end(args, state, control)
        library.warning("a library warning")
        callback.on_train_end(args, state, control)
        library.warning("after the bar")
    finally:
        library.removeHandler(handler)
    printed = out.getvalue()
    # the bar's line is cleared before the warning prints on its own line; the handler has its stream back after
    assert "\x1b[2Ka library warning\n" in printed and "\x1b[0ma library warning" not in printed
    assert printed.endswith("after the bar\n") and handler.stream is out
