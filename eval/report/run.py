"""One run's report (its stages, history, validation per subset, length, reward, format, TRL's curves, throughput,
collapse), and the report of a `python -m eval` folder (one model validated on every subset)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.rundir.files import ERROR, EVALUATION, SAMPLES, VALIDATION, read_mapping, scan_jsonl
from core.rundir.records import Status, level_order, row_level, stage_records
from core.stats import rate_text
from curriculum.tasks.base import Rate, TaskReport
from eval.metrics import trials
from eval.report import samples as sm
from eval.report import series as rs
from eval.report.blocks import Completion, Heading, Image, Table, Text, change_note, code, fmt, grid_table, md_escape
from eval.report.plots import Panel, StageBoxes, grid_lines, plot_categories, plot_stage_boxes, plot_step_panels
from eval.report.story import guard_events, history_blocks, promotion_points, stage_end_blocks, story_blocks
from eval.report.training import curves_blocks, key_panels, throughput_blocks

# (metrics.jsonl key, panel title, y label, why it may be absent) of the collapse watch; a share is drawn on 0..1.
COLLAPSE_KEYS = (
    (("entropy",), "policy entropy: a fast fall is collapse", "nats / token", "not logged by this TRL version"),
    (("completions/clipped_ratio",), "truncated: hit max_completion_length", "share", "not logged"),
    (("frac_reward_zero_std",), "zero-variance groups: no advantage, no signal", "share", "not logged"),
    (("completions/distinct_share",), "distinct completions per group: near-identical rollouts", "share",
     "logged by runs since the collapse guard"),
)
MEAN, SHORTEST, LONGEST = "completions/mean_length", "completions/min_length", "completions/max_length"
# The end of a traceback says what failed; a run folder is untrusted, so only this much of it is read.
ERROR_TAIL_BYTES, ERROR_TAIL_LINES = 16384, 40


def _stage_table(manifest: dict, steps: list[dict]) -> Table:
    """One row per planned stage; a running stage's steps: its last logged stage step (run.json's come at its end)."""
    rows = []
    for s in stage_records(manifest):
        logged = rs.stage_steps(steps, s.index) if s.status == Status.RUNNING else []
        done = (int(logged[-1]["stage_step"]) if logged else None) if s.status == Status.RUNNING else s.steps_done
        rows.append([fmt(s.index), fmt(s.name), fmt(s.kind), fmt(s.level_label), fmt(s.status),
                     f"{fmt(done)}/{fmt(s.steps_budget)}", f"{fmt(s.global_step_start)}..{fmt(s.global_step_end)}",
                     fmt(s.wall_seconds, 1)])
    return Table(["#", "stage", "kind", "level", "status", "steps", "global steps", "wall s"], rows)


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
    """The settings a reader compares runs by: the model, the reward stack, GRPO's key knobs, the eval subsets."""
    def section(name: str) -> dict:
        return config.get(name) if isinstance(config.get(name), dict) else {}

    grpo = section("grpo")
    knobs = ", ".join(f"{k} {grpo[k]}" for k in ("learning_rate", "beta", "num_generations",
                                                  "max_completion_length", "loss_type") if k in grpo)
    return (f"**model** {md_escape(fmt(section('model').get('name')))} · "
            f"**reward stack** {md_escape(reward_stack_text(reward_stack))} · "
            f"**grpo** {md_escape(knobs or '-')} · **eval subsets** {code(fmt(section('eval').get('subsets')))}")


def reward_stack_text(records) -> str:
    """run.json's `reward_stack` (name, weight, where the weight came from) in a line, entries that are none left out.

    >>> reward_stack_text([{"name": "format", "weight": 0.5, "source": "reward.weights"},
    ...                    {"name": "answer", "weight": 0.0, "source": "logged"}, "junk"])
    'format 0.5 (reward.weights), answer 0 (logged)'
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
    facts = [f"**status** {md_escape(fmt(m.get('status')))}", f"**curriculum** {md_escape(fmt(m.get('curriculum')))}",
             f"**stages done** {sum(s.done for s in stages)}/{len(stages)}",
             f"**base model** {code(fmt(m.get('base_model')))}", f"**created** {md_escape(fmt(m.get('created')))}",
             f"**training steps logged** {len(run.steps)}"]
    blocks: list[Heading | Text | Table] = [Text(" · ".join(facts))]
    if run.config:
        blocks.append(Text(_config_facts(run.config, m.get("reward_stack"))))
    blocks += [Text(note, note=True) for note in run.notes]
    blocks += [Text(md_escape(f"stage {s.name} failed: {s.error}"), True) for s in stages if s.error]
    return [*blocks, Heading("Stages"), _stage_table(m, run.steps)] if stages else blocks


def pool_sizes(rows: Sequence[dict], report: TaskReport) -> list[Text]:
    """What the accuracies count: the distinct records of each subset and the samples per record.

    >>> pool_sizes([{"level": "2steps", "n": 63, "puzzles": 63}, {"level": "3steps", "n": 200, "puzzles": 100}],
    ...            TaskReport())[0].text
    '**validation pools** (distinct problems): 2steps 63 · 3steps 100 (2 samples each)'
    """
    latest = {row_level(row): row for row in rows if row_level(row) is not None}
    parts = []
    for level in sorted(latest, key=level_order):
        row = latest[level]
        puzzles, n = row.get("puzzles") or row.get("n"), row.get("n")
        samples = f" ({n // puzzles} samples each)" if isinstance(n, int) and puzzles and n > puzzles else ""
        parts.append(f"{level} {fmt(puzzles)}{samples}")
    return [Text(f"**validation pools** ({md_escape(report.distinct)}): " + " · ".join(parts))] if parts else []


def _accuracy_plot(rows: Sequence[dict], grid: rs.StageGrid, report: TaskReport, out_dir: Path, title: str,
                   caption: str, xlabel: str = "validated after stage (baseline = before training)") -> list:
    """The validation pools and the accuracy plot, with each subset's chance accuracy (the task's) dotted."""
    chance = {level: value for level, value in report.chance.items() if level in grid.levels}
    image = plot_categories(grid_lines(grid), out_dir / "accuracy.png", title=title, xlabel=xlabel,
                            ylabel=f"accuracy ({report.accuracy})", chance=chance, spread=0.3, missing=None)
    dotted = f"; dotted: {report.chance_note}" if chance and report.chance_note else ""
    return [*pool_sizes(rows, report), Image(image, f"{caption}{dotted}")]


def _validation(run: rs.RunData, out_dir: Path) -> list:
    """Accuracy per subset (plot and table), then the rates the task's `TaskReport` shows, format and length."""
    blocks: list = [Heading("Validation accuracy per subset")]
    if not run.validation:
        return [*blocks, Text("no rows in validation.jsonl yet (baseline validation not finished)", True)]
    report, planned = run.task_report, rs.planned_stages(run.manifest)

    def rate_grid(rate: Rate) -> list:
        grid = rs.stage_grid(run.validation, rate.key, planned, rate.counted)
        return [Heading(rate.title), grid_table(grid), *([Text(md_escape(rate.note))] if rate.note else [])]

    blocks += [*_accuracy_plot(run.validation, rs.stage_grid(run.validation, "accuracy"), report, out_dir,
                               "Accuracy per subset across stages",
                               "accuracy per subset after each stage, with 95% Wilson intervals"),
               grid_table(rs.stage_grid(run.validation, "accuracy", planned)), Text(change_note(report))]
    shown = [rate for rate in report.rates if rate.title]
    blocks += [block for rate in shown if rate.beside_accuracy for block in rate_grid(rate)]
    blocks += [Heading("Validation format rate (answers in the required tags)"),
               grid_table(rs.stage_grid(run.validation, "format_rate", planned)),
               Heading("Validation mean response length (tokens)"),
               grid_table(rs.stage_grid(run.validation, "mean_tokens", planned), rate=False)]
    return blocks + [block for rate in shown if not rate.beside_accuracy for block in rate_grid(rate)]


def _length(run: rs.RunData, boundaries, out_dir: Path, events) -> list:
    mean = rs.step_series(run.steps, MEAN, "mean length")
    markers = rs.validation_points(run.validation, "mean_tokens")
    if mean is None and not markers:
        return [Text("no completion lengths in metrics.jsonl, no validation yet: length plot skipped", True)]
    panel = Panel("training mean length per step (band: min..max), validation mean after each stage",
                  "tokens", [mean] if mean else [], markers, rs.step_band(run.steps, SHORTEST, LONGEST), events=events)
    image = plot_step_panels([panel], boundaries, "Response length", out_dir / "length.png")
    return [Image(image, "response length over training; dashed lines: stage starts; "
                         "triangles: promoted on skill; crosses: collapse guard events")]


def training_boxes(manifest: dict, steps: Sequence[dict]) -> StageBoxes | None:
    """Each stage's per-step mean lengths (TRL logs no completion's own), its shortest and longest; None without any.

    >>> manifest = {"stages": [{"index": 1, "name": "2ppl"}, {"index": 2, "name": "3ppl"}]}
    >>> rows = [{"stage": 1, MEAN: 30.0, SHORTEST: 5, LONGEST: 60}, {"stage": 1, MEAN: 20.0, SHORTEST: 8, LONGEST: 40}]
    >>> boxes = training_boxes(manifest, rows)
    >>> boxes.stages, boxes.groups, boxes.extremes
    (['2ppl', '3ppl'], {'': [[30.0, 20.0], []]}, [(5.0, 60.0), (None, None)])
    """
    stages = [(s.index, str(s.name)) for s in stage_records(manifest) if s.index is not None]
    known = {index for index, _ in stages}
    stages += [(index, f"stage {index}") for index in sorted({r.get("stage") for r in steps} - known, key=str)
               if isinstance(index, int)]
    per_stage = [[r for r in steps if r.get("stage") == index] for index, _ in stages]
    values = [rs.numbers(rows, MEAN) for rows in per_stage]
    if not any(values):
        return None
    extremes = [(min(rs.numbers(rows, SHORTEST), default=None), max(rs.numbers(rows, LONGEST), default=None))
                for rows in per_stage]
    return StageBoxes("training: each step's mean completion length (box: the steps' spread)", "tokens",
                      [name for _, name in stages], {"": values}, extremes)


def validation_boxes(run_dir: Path, stage_names: dict[int, str]) -> tuple[StageBoxes | None, list]:
    """Every validation completion's tokens per stage and subset, notes on files not read; None without any."""
    folders = sm.stage_folders(run_dir, stage_names)
    groups: dict[str, list[list[float]]] = {}
    notes: list = []
    for k, (_, _, folder) in enumerate(folders):
        for level, path in sm.subset_files(folder):
            rows, unread = sm.read_subset(path)
            notes += unread
            groups.setdefault(level, [[] for _ in folders])[k] = rs.numbers(rows, "tokens")
    if not any(any(per_stage) for per_stage in groups.values()):
        return None, notes
    title = "validation: every completion's length, after each stage, by subset (samples files)"
    return StageBoxes(title, "tokens", [name for _, name, _ in folders], groups), notes


def length_distribution_blocks(run_dir: Path, manifest: dict, steps: Sequence[dict], stage_names: dict[int, str],
                               out_dir: Path) -> list:
    """The figure of completion lengths per stage, or a note for each half that has nothing to draw."""
    training = training_boxes(manifest, steps)
    validation, notes = validation_boxes(run_dir, stage_names)
    if training is None:
        notes.append(Text(f"no numeric `{MEAN}` in metrics.jsonl: the training length distribution is skipped", True))
    if validation is None:
        notes.append(Text("no `tokens` in samples/<k>-<name>/<level>.jsonl: the validation length distribution is "
                          "skipped", True))
    panels = [p for p in (training, validation) if p is not None]
    if not panels:
        return notes
    image = plot_stage_boxes(panels, "Completion length per stage", out_dir / "length_per_stage.png")
    caption = ("completion length per stage: box from the first to the third quartile, line at the median, whiskers "
               "to 1.5 times that range, circles beyond; n under each stage: steps (training), completions "
               "(validation)")
    return [Image(image, caption), *notes]


def _rewards(run: rs.RunData, boundaries, out_dir: Path) -> list:
    series = rs.reward_series(run.steps)
    if not series:
        return [Text("no reward columns in metrics.jsonl yet: reward plot skipped", True)]
    total = [s for s in series if s.label == "total"]
    components = [s for s in series if s.label != "total"]
    panels = [Panel("total reward (weighted sum)", "reward", total)] if total else []
    panels += [Panel("each component's mean (unweighted)", "reward", components)] if components else []
    image = plot_step_panels(panels, boundaries, "Reward per step", out_dir / "reward.png")
    return [Image(image, "reward total and components per step")]


def _format(run: rs.RunData, boundaries, out_dir: Path) -> list:
    """The task's format reward per step (`TaskReport.format_reward`), the validation format rate after each stage."""
    reward = run.task_report.format_reward
    key = f"rewards/{reward}/mean"
    train = rs.step_series(run.steps, key, f"{reward} (training)") if reward else None
    markers = rs.validation_points(run.validation, "format_rate")
    if not train and not markers:
        return [Text("no format reward and no validation format rate yet: format plot skipped", True)]
    blocks = [] if train or not reward else [Text(f"no {key} in metrics.jsonl (weight 0, or no GRPO step logged): "
                                                  "only the validation format rate is drawn", True)]
    panel = Panel(f"{reward or 'format'} per step, validation format rate after each stage (markers)", "rate",
                  [train] if train else [], markers, unit_range=True)
    image = plot_step_panels([panel], boundaries, "Format", out_dir / "format.png")
    return [*blocks, Image(image, "share of completions in the required format")]


def _collapse(run: rs.RunData, boundaries, out_dir: Path, events) -> list:
    panels, notes = key_panels(run.steps, COLLAPSE_KEYS, events=events, share_range=True)
    if not panels:
        return notes
    image = plot_step_panels(panels, boundaries, "Collapse watch", out_dir / "collapse.png")
    return [Image(image, "entropy, truncation, zero-variance groups and distinct completions per step"), *notes]


def run_report(run_dir: Path, out_dir: Path) -> tuple[str, list]:
    """The title and blocks of one run's report; draws its PNGs into `out_dir`."""
    run = rs.load_run(run_dir)
    boundaries = rs.stage_boundaries(run.manifest, run.steps)
    events = [*promotion_points(run.manifest), *guard_events(run.manifest)]
    names = dict(rs.planned_stages(run.manifest))
    blocks = [*failure_blocks(run_dir), *_summary(run), *history_blocks(run_dir, run.manifest),
              *story_blocks(run.manifest, run.steps, run.validation),
              *stage_end_blocks(run.manifest), *_validation(run, out_dir),
              Heading("Response length"), *_length(run, boundaries, out_dir, events),
              *length_distribution_blocks(run_dir, run.manifest, run.steps, names, out_dir),
              Heading("Reward"), *_rewards(run, boundaries, out_dir), *sm.rollout_blocks(run_dir),
              Heading("Format"), *_format(run, boundaries, out_dir),
              Heading("TRL's training curves"), *curves_blocks(run.manifest, run.steps, boundaries, out_dir),
              Heading("Throughput and memory"), *throughput_blocks(run.manifest, run.steps, boundaries, out_dir),
              Heading("Collapse watch"), *_collapse(run, boundaries, out_dir, events),
              *sm.samples_blocks(run_dir, names, run.task_report)]
    return f"Run report: {run_dir.name}", blocks


# --- a `python -m eval` folder: evaluation.json, config.yaml, validation.jsonl, samples/<level>.jsonl ------------


def is_evaluation(path: Path) -> bool:
    return (path / EVALUATION).is_file()


def subsets_table(rows: list[dict], report: TaskReport) -> Table:
    """A row per subset: every rate the task shows (accuracy first) with its interval and n, then the mean length."""
    rates = [("accuracy", "accuracy", ()), *((r.key, r.name, r.counted) for r in report.rates if r.beside_accuracy),
             ("format_rate", "format", ()), ("truncation_rate", "truncated", ()),
             *((r.key, r.name, r.counted) for r in report.rates if not r.beside_accuracy and r.title)]
    cells = [[str(row_level(row)), *(rate_text(rs.as_number(row.get(key)), trials(row, key, counted))
                                     for key, _, counted in rates), fmt(rs.as_number(row.get("mean_tokens")), 1)]
             for row in rows]
    return Table(["subset", *(name for _, name, _ in rates), "mean tokens"], cells)


def evaluation_report(folder: Path, out_dir: Path) -> tuple[str, list]:
    """The title and blocks of a `python -m eval` folder's report; draws its accuracy plot into `out_dir`."""
    record = read_mapping(folder / EVALUATION, inside=folder)
    report = TaskReport.from_json(record.get("task_report")) or TaskReport()
    scan = scan_jsonl(folder / VALIDATION, inside=folder)
    rows = sorted((r for r in scan.rows if row_level(r) is not None), key=lambda r: level_order(row_level(r)))
    model = record.get("model") or next((r.get("stage_name") for r in rows), None)
    facts = [f"**model** {code(fmt(model))}", f"**task** {md_escape(fmt(record.get('task')))}",
             f"**validated** {md_escape(fmt(record.get('created')))}"]
    blocks: list = [Text(" · ".join(facts))]
    if scan.damaged:
        blocks.append(Text(f"{code(VALIDATION)}: skipped {len(scan.damaged)} unreadable line(s)", True))
    blocks.append(Heading("Validation per subset"))
    if not rows:
        return f"Validation report: {folder.name}", [*blocks, Text("no rows in validation.jsonl yet", True)]
    grid = rs.stage_grid([{**r, "stage": 0, "stage_name": "the model"} for r in rows], "accuracy")
    blocks += [*_accuracy_plot(rows, grid, report, out_dir, "Accuracy per subset",
                               "accuracy per subset with its 95% Wilson interval", xlabel=""),
               subsets_table(rows, report),
               Text("Each rate: its value, its 95% Wilson interval [low, high] and n, the distinct "
                    f"{md_escape(report.record)}s it counts."), *sm.samples_intro(report, "samples/<level>.jsonl")]
    root = folder / SAMPLES
    files = sm.subset_files(root) if root.is_dir() and not root.is_symlink() else []
    if not files:
        blocks.append(Text("no graded completions in samples/", True))
    for level, path in files:
        rows, notes = sm.read_subset(path)
        blocks += [Heading(level, level=3), *notes, *sm.subset_blocks(rows, report)]
    return f"Validation report: {model or folder.name}", blocks
