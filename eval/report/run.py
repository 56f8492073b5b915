"""One run's report: its stages, its history, how they ended, validation per subset, length, reward, format, TRL's
curves, throughput, collapse.

A report is a list of blocks (`eval.report.blocks`); this module only chooses and orders them, from
the series `eval.report.series` reads and the figures `eval.report.plots` draws.
"""

from __future__ import annotations

from pathlib import Path

from core.rundir.files import ERROR
from core.rundir.records import Status, stage_records
from curriculum.tasks.base import Rate
from eval.report import adaptive as ra
from eval.report import series as rs
from eval.report.blocks import Completion, Heading, Image, Table, Text, code, fmt, md_escape
from eval.report.history import history_blocks
from eval.report.lengths import length_distribution_blocks
from eval.report.plots import Panel, plot_stage_grid, plot_step_panels
from eval.report.rollouts import rollout_blocks
from eval.report.samples import samples_blocks
from eval.report.story import story_blocks
from eval.report.tables import change_note, grid_table, pool_sizes
from eval.report.training import curves_blocks, throughput_blocks

# (metrics.jsonl key, panel title, y label, why it may be absent) of the collapse watch
# A share is drawn on a fixed 0..1 axis.
COLLAPSE_KEYS = (
    ("entropy", "policy entropy: a fast fall is collapse", "nats / token", "not logged by this TRL version"),
    ("completions/clipped_ratio", "truncated: hit max_completion_length", "share", "not logged"),
    ("frac_reward_zero_std", "zero-variance groups: no advantage, no signal", "share", "not logged"),
    ("completions/distinct_share", "distinct completions per group: near-identical rollouts", "share",
     "logged by runs since the collapse guard"),
)  # the KL, with its reference refreshes: `eval.report.training`


def _stage_table(manifest: dict, steps: list[dict]) -> Table:
    """One row per planned stage; a running stage's steps are counted from metrics.jsonl, since
    run.json records `steps_done` only when a stage ends."""
    logged: dict = {}
    for row in steps:
        stage_step = int(rs.as_number(row.get("stage_step")) or 0)
        logged[row.get("stage")] = max(logged.get(row.get("stage"), 0), stage_step)
    rows = []
    for s in stage_records(manifest):
        done = logged.get(s.index) if s.status == Status.RUNNING else s.steps_done
        rows.append([fmt(s.index), fmt(s.name), fmt(s.kind), fmt(s.level_label), fmt(s.status),
                     f"{fmt(done)}/{fmt(s.steps_budget)}", f"{fmt(s.global_step_start)}..{fmt(s.global_step_end)}",
                     fmt(s.wall_seconds, 1)])
    return Table(["#", "stage", "kind", "level", "status", "steps", "global steps", "wall s"], rows)


# The end of a traceback says what failed; a run folder is untrusted, so only this much of it is read.
ERROR_TAIL_BYTES, ERROR_TAIL_LINES = 16384, 40


def failure_blocks(run_dir: Path) -> list:
    """A failed run leads with its error.txt (the traceback's last lines), before anything it did not finish."""
    path = run_dir / ERROR
    if not path.is_file() or path.is_symlink():
        return []
    with open(path, "rb") as fh:
        fh.seek(max(path.stat().st_size - ERROR_TAIL_BYTES, 0))
        lines = fh.read().decode("utf-8", errors="replace").splitlines()
    last = next((line for line in reversed(lines) if line.strip()), "")
    return [Heading("This run failed"),
            Text(f"{md_escape(last)} (the last lines of {code(ERROR)} below; a resume that finishes the run "
                 "removes it)"),
            Completion("\n".join(lines[-ERROR_TAIL_LINES:]))]


def _config_facts(config: dict, reward_stack) -> str:
    """The settings a reader compares runs by: the model, the reward stack as run.json records it, GRPO's key knobs
    and the validation subsets from config.yaml (escaped: a run folder from elsewhere may hold Markdown)."""
    def section(name: str) -> dict:
        return config.get(name) if isinstance(config.get(name), dict) else {}

    grpo = section("grpo")
    knobs = ", ".join(f"{k} {grpo[k]}" for k in ("learning_rate", "beta", "num_generations",
                                                  "max_completion_length", "loss_type") if k in grpo)
    return (f"**model** {md_escape(fmt(section('model').get('name')))} · "
            f"**reward stack** {md_escape(reward_stack_text(reward_stack))} · "
            f"**grpo** {md_escape(knobs or '-')} · **eval subsets** {code(fmt(section('eval').get('subsets')))}")


def reward_stack_text(records) -> str:
    """run.json's `reward_stack` (every component TRL weighed: name, weight, where the weight came from) in a line;
    read back untrusted, an entry that is not one is left out.

    >>> reward_stack_text([{"name": "format", "weight": 0.5, "source": "reward.weights"},
    ...                    {"name": "answer", "weight": 0.0, "source": "logged"},
    ...                    {"name": "low_tokens", "weight": 1.0, "source": "reward.custom"}, "junk"])
    'format 0.5 (reward.weights), answer 0 (logged), low_tokens 1 (reward.custom)'
    >>> reward_stack_text(None)
    'not recorded (a run without a GRPO stage)'
    """
    shown = [f"{entry['name']} {float(entry['weight']):g} ({entry.get('source', '?')})"
             for entry in (records if isinstance(records, list) else ())
             if isinstance(entry, dict) and isinstance(entry.get("name"), str) and rs.as_number(entry.get("weight"))
             is not None]
    return ", ".join(shown) or "not recorded (a run without a GRPO stage)"


def _summary(run: rs.RunData) -> list:
    m = run.manifest
    stages = stage_records(m)
    done = sum(s.done for s in stages)
    facts = [f"**status** {md_escape(fmt(m.get('status')))}", f"**curriculum** {md_escape(fmt(m.get('curriculum')))}",
             f"**stages done** {done}/{len(stages)}", f"**base model** {code(fmt(m.get('base_model')))}",
             f"**created** {md_escape(fmt(m.get('created')))}", f"**training steps logged** {len(run.steps)}"]
    blocks: list[Heading | Text | Table] = [Text(" · ".join(facts))]
    if run.config:
        blocks.append(Text(_config_facts(run.config, m.get("reward_stack"))))
    blocks += [Text(note, note=True) for note in run.notes]
    blocks += [Text(md_escape(f"stage {s.name} failed: {s.error}"), True) for s in stages if s.error]
    if stages:
        blocks += [Heading("Stages"), _stage_table(m, run.steps)]
    return blocks


def _validation(run: rs.RunData, out_dir: Path) -> list:
    """Accuracy per subset (plot and table), then the task's readings of accuracy, format and length, then its
    other rates: what the run's task shows (`TaskReport`), no more."""
    blocks: list = [Heading("Validation accuracy per subset")]
    if not run.validation:
        return [*blocks, Text("no rows in validation.jsonl yet (baseline validation not finished)", True)]
    report, planned = run.task_report, rs.planned_stages(run.manifest)
    plotted = rs.stage_grid(run.validation, "accuracy")
    chance = {level: value for level, value in report.chance.items() if level in plotted.levels}
    image = plot_stage_grid(plotted, f"accuracy ({report.accuracy})", "Accuracy per subset across stages",
                            out_dir / "accuracy.png", unit_range=True, chance=chance)
    blocks += [b for b in (pool_sizes(run.validation, report),) if b is not None]
    dotted = f"; dotted: {report.chance_note}" if chance and report.chance_note else ""
    blocks += [Image(image, f"accuracy per subset after each stage, with 95% Wilson intervals{dotted}"),
               grid_table(rs.stage_grid(run.validation, "accuracy", planned)), Text(change_note(report))]
    shown = [rate for rate in report.rates if rate.title]
    for rate in [r for r in shown if r.beside_accuracy]:
        blocks += _rate_grid(run, rate, planned)
    blocks += _format_and_length(run, planned)
    for rate in [r for r in shown if not r.beside_accuracy]:
        blocks += _rate_grid(run, rate, planned)
    return blocks


def _rate_grid(run: rs.RunData, rate: Rate, planned) -> list:
    grid = rs.stage_grid(run.validation, rate.key, planned, rate.counted)
    return [Heading(rate.title), grid_table(grid), *([Text(md_escape(rate.note))] if rate.note else [])]


def _format_and_length(run: rs.RunData, planned) -> list:
    return [Heading("Validation format rate (answers in the required tags)"),
            grid_table(rs.stage_grid(run.validation, "format_rate", planned)),
            Heading("Validation mean response length (tokens)"),
            grid_table(rs.stage_grid(run.validation, "mean_tokens", planned), rate=False)]


def _stage_ends(run: rs.RunData) -> list:
    """Why each stage ended (promotion by skill, the collapse guard, or its step budget) and the guard's events."""
    ends, events = ra.stage_end_rows(run.manifest), ra.guard_rows(run.manifest)
    blocks: list = []
    if ends:
        headers = ["stage", "ended by", "step/budget", "held-out accuracy", "threshold", "weights kept from step"]
        blocks += [Heading("How each stage ended"), Table(headers, ends)]
    if events:
        blocks += [Heading("Collapse guard events"),
                   Table(["stage", "stage step", "global step", "signal", "value", "threshold", "window", "action"],
                         events)]
    return blocks


def _length(run: rs.RunData, boundaries, out_dir: Path, events=()) -> list:
    mean = rs.step_series(run.steps, "completions/mean_length", "mean length")
    markers = rs.validation_points(run.validation, "mean_tokens")
    if mean is None and not markers:
        return [Text("no completion lengths in metrics.jsonl, no validation yet: length plot skipped", True)]
    panel = Panel("training mean length per step (band: min..max), validation mean after each stage",
                  "tokens", [mean] if mean else [], markers,
                  rs.step_band(run.steps, "completions/min_length", "completions/max_length"), events=events)
    image = plot_step_panels([panel], boundaries, "Response length", out_dir / "length.png")
    return [Image(image, "response length over training; dashed lines: stage starts; "
                         "triangles: promoted on skill; crosses: collapse guard events")]


def _rewards(run: rs.RunData, boundaries, out_dir: Path) -> list:
    series = rs.reward_series(run.steps)
    if not series:
        return [Text("no reward columns in metrics.jsonl yet: reward plot skipped", True)]
    total = [s for s in series if s.label == "total"]
    panels = [Panel("total reward (weighted sum)", "reward", total)] if total else []
    components = [s for s in series if s.label != "total"]
    if components:
        panels.append(Panel("each component's mean (unweighted)", "reward", components))
    image = plot_step_panels(panels, boundaries, "Reward per step", out_dir / "reward.png")
    return [Image(image, "reward total and components per step")]


def _format(run: rs.RunData, boundaries, out_dir: Path) -> list:
    """The task's format reward per training step (`TaskReport.format_reward`), the validation format rate after
    each stage."""
    reward = run.task_report.format_reward
    key = f"rewards/{reward}/mean"
    train = rs.step_series(run.steps, key, f"{reward} (training)") if reward else None
    markers = rs.validation_points(run.validation, "format_rate")
    blocks = [] if train or not reward else [Text(f"no {key} in metrics.jsonl (weight 0, or no GRPO step logged): "
                                                  "only the validation format rate is drawn", True)]
    if not train and not markers:
        return [Text("no format reward and no validation format rate yet: format plot skipped", True)]
    panel = Panel(f"{reward or 'format'} per step, validation format rate after each stage (markers)", "rate",
                  [train] if train else [], markers, unit_range=True)
    image = plot_step_panels([panel], boundaries, "Format", out_dir / "format.png")
    return [*blocks, Image(image, "share of completions in the required format")]


def _collapse(run: rs.RunData, boundaries, out_dir: Path, events=()) -> list:
    panels, notes = [], []
    for key, title, ylabel, why in COLLAPSE_KEYS:
        series = rs.step_series(run.steps, key)
        if series is None:
            notes.append(Text(f"no numeric `{key}` in metrics.jsonl ({why}): panel '{title}' skipped", True))
        else:
            panels.append(Panel(f"{title}  ({key})", ylabel, [series], unit_range=ylabel == "share", events=events))
    if not panels:
        return notes
    image = plot_step_panels(panels, boundaries, "Collapse watch", out_dir / "collapse.png")
    return [Image(image, "entropy, truncation, zero-variance groups and distinct completions per step"), *notes]


def run_report(run_dir: Path, out_dir: Path) -> tuple[str, list]:
    """The title and blocks of one run's report; draws its PNGs into `out_dir`."""
    run = rs.load_run(run_dir)
    boundaries = rs.stage_boundaries(run.manifest, run.steps)
    events = [*ra.promotion_points(run.manifest), *ra.guard_events(run.manifest)]
    story = story_blocks(run.manifest, run.steps, run.validation)
    names = dict(rs.planned_stages(run.manifest))
    blocks = [*failure_blocks(run_dir), *_summary(run), *history_blocks(run_dir, run.manifest),
              *([Heading("What each stage did"), *story] if story else []),
              *_stage_ends(run), *_validation(run, out_dir),
              Heading("Response length"), *_length(run, boundaries, out_dir, events),
              *length_distribution_blocks(run_dir, run.manifest, run.steps, names, out_dir),
              Heading("Reward"), *_rewards(run, boundaries, out_dir), *rollout_blocks(run_dir),
              Heading("Format"), *_format(run, boundaries, out_dir),
              Heading("TRL's training curves"), *curves_blocks(run.manifest, run.steps, boundaries, out_dir),
              Heading("Throughput and memory"), *throughput_blocks(run.manifest, run.steps, boundaries, out_dir),
              Heading("Collapse watch"), *_collapse(run, boundaries, out_dir, events),
              *samples_blocks(run_dir, names, run.task_report)]
    return f"Run report: {run_dir.name}", blocks
