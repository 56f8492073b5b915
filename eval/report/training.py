"""TRL's own training curves from metrics.jsonl (loss, grad_norm, learning rate, reward std, clip shares, the KL to
the reference), a table of them per stage, and throughput and memory where the rows hold them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from core.rundir.files import STAGES, stage_dirname
from core.rundir.records import StageRecord, stage_records
from core.stage_kinds import recorded_kind
from eval.report.blocks import Image, Table, Text, fmt
from eval.report.plots import Panel, plot_step_panels
from eval.report.series import Boundary, Series, as_number, numbers, stage_steps, step_series
from eval.report.story import REFRESH, Event

# (metrics.jsonl keys: one line each, panel title, y label, why they may be absent) of the curves panel
CURVES = (
    (("loss",), "loss (GRPO's is ~0 by construction with one update per batch)", "loss", "not logged"),
    (("grad_norm",), "gradient norm, before clipping", "norm", "not logged"),
    (("learning_rate",), "learning rate (0: a warmup step that learns nothing)", "learning rate", "not logged"),
    (("reward_std",), "reward std: the reward's spread, the signal GRPO's advantages come from", "reward",
     "not logged (a stage without rewards)"),
    (("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"),
     "PPO ratio clipping: share of tokens clipped (region: either side)", "share", "not logged by this loss type"),
)
KL = "kl"
REFRESH_SENTENCE = ("At each blue diamond (a stage boundary) the reference was refreshed: it became the previous "
                    "stage's final, the very weights the policy starts the stage from, so the KL drops to ~0 there "
                    "and grows as the stage trains, a sawtooth and not a fault.")
NO_REFRESH_SENTENCE = ("The reference was never refreshed at a stage boundary (reference: rl_start or base): the KL "
                       "is measured against one checkpoint throughout and does not reset between stages.")
UNKNOWN_REFERENCE_SENTENCE = ("run.json records no stage's reference (a run from before it did): a refresh, where "
                              "the KL would drop to ~0 at a stage boundary, cannot be marked.")
THROUGHPUT = "tokens per second"


def is_final_of(reference, stage: StageRecord) -> bool:
    """Whether `reference` (a path run.json records) is `stage`'s final (`<run>/stages/<k>-<name>/final`).

    >>> stage = StageRecord(index=1, name="2ppl")
    >>> is_final_of("/o/runs/r/stages/1-2ppl/final", stage), is_final_of("/models/base", stage)
    (True, False)
    """
    if not isinstance(reference, str) or stage.index is None or stage.name is None:
        return False
    return Path(reference).parts[-3:] == (STAGES, stage_dirname(stage.index, stage.name), "final")


def reference_refreshes(manifest: dict) -> list[Event]:
    """A refresh at the start of each stage whose reference is the stage before's final (its KL starts at ~0).

    >>> stages = [{"index": 1, "name": "2ppl", "reference": "/base", "global_step_start": 0},
    ...           {"index": 2, "name": "3ppl", "reference": "/r/stages/1-2ppl/final", "global_step_start": 4}]
    >>> reference_refreshes({"stages": stages})
    [Event(step=4.5, label="3ppl: reference = 2ppl's final", kind='refresh')]
    """
    stages = stage_records(manifest)
    return [Event(stage.global_step_start + 0.5, f"{stage.name}: reference = {before.name}'s final", REFRESH)
            for before, stage in zip(stages, stages[1:], strict=False)
            if is_final_of(stage.reference, before) and as_number(stage.global_step_start) is not None]


def loss_series(manifest: dict, steps: Sequence[dict]) -> list[Series]:
    """The loss, one line per stage kind where the run has several: an SFT and a GRPO loss are different quantities."""
    kinds = {s.index: s.kind_facts.label for s in stage_records(manifest)}
    unknown = recorded_kind(None).label  # a row of a stage run.json does not list: as an entry without a kind
    of_kind = {label: [r for r in steps if kinds.get(r.get("stage"), unknown) == label]
               for label in dict.fromkeys(kinds.get(r.get("stage"), unknown) for r in steps)}
    split = [step_series(rows, "loss", f"loss ({label})" if len(of_kind) > 1 else None)
             for label, rows in of_kind.items()]
    return [s for s in split if s is not None]


def key_panels(steps: Sequence[dict], specs, *, loss: list[Series] | None = None, events: Sequence[Event] = (),
               share_range: bool = False) -> tuple[list[Panel], list]:
    """A panel per (keys, title, y label, why absent) of `specs` that has a key logged, else a note; `loss`: the
    loss panel's lines; `share_range`: a share drawn on 0..1."""
    panels, notes = [], []
    for keys, title, ylabel, why in specs:
        lines = loss if keys == ("loss",) and loss is not None else \
            [s for key in keys if (s := step_series(steps, key)) is not None]
        if lines:
            panels.append(Panel(f"{title}  ({', '.join(keys)})", ylabel, lines, events=events,
                                unit_range=share_range and ylabel == "share"))
        else:
            notes.append(Text(f"no numeric `{keys[0]}` in metrics.jsonl ({why}): panel '{title}' skipped", True))
    return panels, notes


def curves_blocks(manifest: dict, steps: Sequence[dict], boundaries: Sequence[Boundary], out_dir: Path) -> list:
    """TRL's curves per step, the KL's refreshes marked and read in a sentence, then the per-stage table."""
    panels, notes = key_panels(steps, CURVES, loss=loss_series(manifest, steps))
    if (kl := step_series(steps, KL)) is None:
        kl_notes = [Text(f"no numeric `{KL}` in metrics.jsonl (logged only when grpo.beta > 0): panel 'KL to the "
                         "reference' skipped", True)]
    else:
        refreshes = reference_refreshes(manifest)
        recorded = any(s.reference for s in stage_records(manifest))
        panels.append(Panel(f"KL to the reference  ({KL})", "KL", [kl], events=refreshes))
        sentence = REFRESH_SENTENCE if refreshes else NO_REFRESH_SENTENCE if recorded else UNKNOWN_REFERENCE_SENTENCE
        kl_notes = [Text(sentence, note=not recorded)]
    if not panels:
        return [*notes, *kl_notes]
    image = plot_step_panels(panels, boundaries, "TRL's training curves", out_dir / "training_curves.png")
    return [Image(image, "TRL's logged curves per step; dashed lines: stage starts"), *kl_notes, *notes,
            *([table] if (table := stage_curves_table(manifest, steps)) else []), *ratio_clipping_note(steps)]


def ratio_clipping_note(steps: Sequence[dict]) -> list:
    """Say when PPO-style ratio clipping (epsilon, clip-higher's epsilon_high) never acted, and why."""
    clipped = [r["clip_ratio/region_mean"] for r in steps if isinstance(r.get("clip_ratio/region_mean"), int | float)]
    if not clipped or any(clipped):
        return []
    return [Text("`clip_ratio/region_mean` is 0 at every step: with one optimizer step per generation batch and "
                 "num_iterations 1 the importance ratio is exactly 1, so epsilon / epsilon_high (clip-higher) never "
                 "acted. They act only when num_iterations > 1 or steps_per_generation > "
                 "gradient_accumulation_steps. (The collapse watch's truncation panel, `completions/clipped_ratio`, "
                 "is another thing: completions cut at max_completion_length.)", True)]


def _number(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _first_last(values: Sequence[float]) -> str:
    return "-" if not values else _number(values[0]) + (f" → {_number(values[-1])}" if len(values) > 1 else "")


def _median(values: Sequence[float]) -> str:
    return _number(statistics.median(values)) if values else "-"


def logged_stages(manifest: dict, steps: Sequence[dict]) -> list[tuple[StageRecord, list[dict]]]:
    """(stage, its step rows) of every stage in run.json that logged steps."""
    return [(stage, logged) for stage in stage_records(manifest)
            if stage.index is not None and (logged := stage_steps(steps, stage.index))]


def stage_curves_table(manifest: dict, steps: Sequence[dict]) -> Table | None:
    """Per stage that logged steps: loss, grad_norm, learning rate and KL first to last, the median reward std and
    clip share; None without a stage."""
    rows = []
    for stage, logged in logged_stages(manifest, steps):
        grad = numbers(logged, "grad_norm")
        rows.append([fmt(stage.name), str(len(logged)), _first_last(numbers(logged, "loss")),
                     f"{_median(grad)} (max {_number(max(grad))})" if grad else "-",
                     _first_last(numbers(logged, "learning_rate")), _median(numbers(logged, "reward_std")),
                     _median(numbers(logged, "clip_ratio/region_mean")), _first_last(numbers(logged, KL))])
    headers = ["stage", "steps", "loss first → last", "grad_norm median", "learning rate first → last",
               "reward std median", "clip share median", "KL first → last"]
    return Table(headers, rows) if rows else None


def tokens_per_second(steps: Sequence[dict]) -> Series | None:
    """Tokens per second of each logged step: TRL's `num_tokens` (counted from the stage's start) since the stage's
    previous row, over `step_time` times the steps between them.

    >>> rows = [{"stage": 1, "stage_step": 1, "global_step": 1, "num_tokens": 100, "step_time": 2.0},
    ...         {"stage": 1, "stage_step": 2, "global_step": 2, "num_tokens": 400, "step_time": 1.5},
    ...         {"stage": 2, "stage_step": 1, "global_step": 3, "num_tokens": 90, "step_time": 1.0}]
    >>> tokens_per_second(rows)
    Series(label='tokens per second', x=[1, 2, 3], y=[50.0, 200.0, 90.0])
    """
    points = {}
    for index in dict.fromkeys(r.get("stage") for r in steps):
        before_tokens, before_step = 0.0, 0
        for row in stage_steps(steps, index):
            tokens, seconds = as_number(row.get("num_tokens")), as_number(row.get("step_time"))
            step, at = int(row["stage_step"]), as_number(row.get("global_step"))
            if tokens is not None and seconds and seconds > 0 and at is not None and tokens >= before_tokens \
                    and step > before_step:
                points[int(at)] = (tokens - before_tokens) / (seconds * (step - before_step))
            if tokens is not None:
                before_tokens, before_step = tokens, step
    return Series(THROUGHPUT, sorted(points), [points[k] for k in sorted(points)]) if points else None


def memory_unit(keys: Sequence[str]) -> str:
    """The memory panel's axis label: GiB when every key's name says so (ours end in `_gib`), else as logged.

    >>> memory_unit(["memory/peak_rss_gib", "memory/cuda_peak_allocated_gib"]), memory_unit(["memory/peak_gb"])
    ('GiB', 'as logged')
    """
    return "GiB" if all(key.endswith("_gib") for key in keys) else "as logged"


def throughput_blocks(manifest: dict, steps: Sequence[dict], boundaries: Sequence[Boundary], out_dir: Path) -> list:
    """Tokens per second and memory per step, where the rows hold them; then each stage's medians and peaks."""
    speed = tokens_per_second(steps)
    memory = [k for k in dict.fromkeys(k for r in steps for k in r)  # a key naming memory: a callback's
              if "memory" in k.lower() and any(as_number(r.get(k)) is not None for r in steps)]
    notes = [] if speed else [Text("no `num_tokens` and `step_time` in metrics.jsonl: tokens per second skipped",
                                   True)]
    if not memory:
        notes.append(Text("no memory in metrics.jsonl (TRL logs none; a key naming `memory`, as a callback may log, "
                          "is drawn): memory skipped", True))
    panels = [Panel(f"{THROUGHPUT} (TRL's num_tokens, prompt and completion, per step_time)", "tokens / s",
                    [speed])] if speed else []
    if memory:
        panels.append(Panel(f"memory  ({', '.join(memory)})", memory_unit(memory),
                            [s for key in memory if (s := step_series(steps, key)) is not None]))
    if not panels:
        return notes
    title = "Throughput and memory" if memory else "Throughput"
    image = plot_step_panels(panels, boundaries, title, out_dir / "throughput.png")
    return [Image(image, "tokens per second and memory per step; dashed lines: stage starts"), *notes,
            *([table] if (table := throughput_table(manifest, steps, speed, memory)) else [])]


def throughput_table(manifest: dict, steps: Sequence[dict], speed: Series | None, memory: list[str]) -> Table | None:
    """Per stage: median tokens per second and step time, its validation's tokens per second, each memory peak."""
    rate = dict(zip(speed.x, speed.y, strict=True)) if speed else {}
    rows = []
    for stage, logged in logged_stages(manifest, steps):
        at = [rate[int(r["global_step"])] for r in logged if as_number(r.get("global_step")) in rate]
        cost = stage.validation_cost if isinstance(stage.validation_cost, dict) else {}
        peaks = [_number(max(numbers(logged, key), default=None)) for key in memory]
        rows.append([fmt(stage.name), _median(at), _median(numbers(logged, "step_time")),
                     _number(as_number(cost.get("tokens_per_second"))), *peaks])
    headers = ["stage", "tokens/s median", "step_time median (s)", "validation tokens/s",
               *(f"peak {key}" for key in memory)]
    return Table(headers, rows) if rows else None
