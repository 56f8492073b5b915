"""A run's story: what each stage did, in words (reward step by step, steps without signal (every group's rewards
equal: `frac_reward_zero_std` 1), collapses, each validation change with its interval), how it ended, its history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.checks import is_int
from core.rundir.files import REFUSED_FINAL, STAGES, stage_dirname
from core.rundir.records import StageRecord, Status, level_order, row_level, stage_records
from core.stats import difference_interval, rate_text
from eval.metrics import trials
from eval.report.blocks import Heading, Table, Text, code, fmt, md_escape
from eval.report.series import as_number, rows_at, stage_steps

NO_SIGNAL_KEY = "frac_reward_zero_std"
# Entropy or mean length under this share of the run's first value, from some step to a stage's last, is a collapse
COLLAPSE_SHARE = 0.5
COLLAPSE_SIGNALS = (("entropy", "entropy"), ("completions/mean_length", "mean completion length"))
PROMOTION, GUARD, REFRESH = "promotion", "guard", "refresh"
RESUME_RECORD = "resume-"  # `.hydra/resume-<time>/`: one per resume that went on (conf/__init__.py)


@dataclass(frozen=True)
class Event:
    """A point in training to mark on the per-step plots."""

    step: float  # global step
    label: str
    kind: str  # promotion | guard | refresh (a stage whose KL reference is the previous stage's final)


def curve_words(rows: Sequence[dict], key: str, label: str) -> str | None:
    """`key` at a stage's first step, its peak (or low, for a loss) and its last, read step by step.

    >>> rows = [{"stage_step": s, "reward": r} for s, r in enumerate([0.58, 1.1, 1.5, 1.22, 0.625], start=1)]
    >>> curve_words(rows, "reward", "reward")
    'reward 0.580 at step 1, peak 1.500 at step 3, 0.625 at its last step (5)'
    >>> curve_words(rows[2:], "reward", "reward"), curve_words(rows[:1], "reward", "reward")
    ('reward 1.500 at step 3 (its peak), 0.625 at its last step (5)', 'reward 0.580 (one step)')
    >>> curve_words(rows[:3], "reward", "reward")
    'reward 0.580 at step 1, peak 1.500 at its last step (3)'
    """
    points = [(int(r["stage_step"]), as_number(r.get(key))) for r in rows if as_number(r.get(key)) is not None]
    if not points:
        return None
    (first_step, first), (last_step, last) = points[0], points[-1]
    if len(points) == 1:
        return f"{label} {first:.3f} (one step)"
    best_step, best = (min if key == "loss" else max)(points, key=lambda p: p[1])
    extreme = "lowest" if key == "loss" else "peak"
    if best_step == first_step:
        return f"{label} {first:.3f} at step {first_step} (its {extreme}), {last:.3f} at its last step ({last_step})"
    if best_step == last_step:
        return f"{label} {first:.3f} at step {first_step}, {extreme} {last:.3f} at its last step ({last_step})"
    return (f"{label} {first:.3f} at step {first_step}, {extreme} {best:.3f} at step {best_step}, "
            f"{last:.3f} at its last step ({last_step})")


def no_signal_words(rows: Sequence[dict]) -> str | None:
    """How many GRPO steps had no signal (every group's rewards equal), and which.

    >>> print(no_signal_words([{"stage_step": 1, NO_SIGNAL_KEY: 1.0}, {"stage_step": 2, NO_SIGNAL_KEY: 0.5}]))
    1 of 2 steps without signal (every group's rewards equal: step 1)
    >>> print(no_signal_words([{"stage_step": 1, NO_SIGNAL_KEY: 1.0}]))
    no step had signal: every group's rewards were equal, so nothing was learned from the reward
    """
    logged = [r for r in rows if as_number(r.get(NO_SIGNAL_KEY)) is not None]
    if not logged:
        return None
    silent = [int(r["stage_step"]) for r in logged if as_number(r[NO_SIGNAL_KEY]) >= 1.0]
    if len(silent) == len(logged):
        return "no step had signal: every group's rewards were equal, so nothing was learned from the reward"
    if not silent:
        steps = "its one step" if len(logged) == 1 else f"every one of its {len(logged)} steps"
        return f"{steps} had signal (some group's rewards differed)"
    shown = ", ".join(map(str, silent[:10])) + (", ..." if len(silent) > 10 else "")
    return (f"{len(silent)} of {len(logged)} steps without signal (every group's rewards equal: "
            f"step{'s' if len(silent) > 1 else ''} {shown})")


def first_values(steps: Sequence[dict], stages: Sequence[StageRecord]) -> dict[str, tuple[int, float]]:
    """(global step, value) of each collapse signal's first value over the stages that learn from rewards.

    >>> rows = [{"stage": 1, "global_step": 2, "entropy": 0.8}, {"stage": 1, "global_step": 1, "entropy": 0.9}]
    >>> first_values(rows, [StageRecord(index=1, kind="grpo")])
    {'entropy': (1, 0.9)}
    """
    rewarded = {s.index for s in stages if s.kind_facts.learns_from_rewards}
    found = {}
    for key, _ in COLLAPSE_SIGNALS:
        points = [(int(step), value) for r in steps if r.get("stage") in rewarded
                  and (step := as_number(r.get("global_step"))) is not None
                  and (value := as_number(r.get(key))) is not None]
        if points:
            found[key] = min(points)
    return found


def collapse_words(rows: Sequence[dict], key: str, label: str, first: tuple[int, float] | None) -> str | None:
    """A collapse of `key`: under COLLAPSE_SHARE of the run's `first` (global step, value) to the stage's last step.

    >>> rows = [{"stage_step": s, "entropy": e} for s, e in enumerate([0.8, 0.5, 0.3, 0.1], start=1)]
    >>> collapse_words(rows, "entropy", "entropy", (1, 0.8))
    "entropy collapsed: under 50% of the run's first value (0.8 at global step 1) from step 3 (0.3) to its last (0.1)"
    >>> collapse_words(rows[:2], "entropy", "entropy", (1, 0.8)) is None
    True
    """
    points = [(int(r["stage_step"]), v) for r in rows if (v := as_number(r.get(key))) is not None]
    if not points or first is None or first[1] <= 0:
        return None
    below = [value < COLLAPSE_SHARE * first[1] for _, value in points]
    if not below[-1]:
        return None
    start = len(below) - next((i for i, low in enumerate(reversed(below)) if not low), len(below))
    (step, value), last = points[start], points[-1][1]
    since = "from its first step" if start == 0 else f"from step {step}"
    return (f"{label} collapsed: under {COLLAPSE_SHARE:.0%} of the run's first value ({first[1]:.3g} at global step "
            f"{first[0]}) {since} ({value:.3g}) to its last ({last:.3g})")


def change_words(before: dict, after: dict) -> str:
    """One subset's accuracy from one validation to the next, with Newcombe's 95% interval for the change.

    >>> change_words({"accuracy": 0.25, "n": 4}, {"accuracy": 0.5, "n": 4})
    '0.25 → 0.50 (+0.25, 95% interval -0.32 to +0.66, n=4: within noise)'
    >>> change_words({"accuracy": 0.1, "n": 100}, {"accuracy": 0.3, "n": 100})
    '0.10 → 0.30 (+0.20, 95% interval +0.09 to +0.31, n=100: beyond chance)'
    """
    a, b = as_number(before.get("accuracy")), as_number(after.get("accuracy"))
    n_a, n_b = trials(before, "accuracy"), trials(after, "accuracy")
    if a is None or b is None or not n_a or not n_b:
        return f"{a} → {b} (n unknown)"
    low, high = difference_interval(a, n_a, b, n_b)
    verdict = "beyond chance" if low > 0 or high < 0 else "within noise"
    n = f"n={n_b}" if n_a == n_b else f"n={n_a} and {n_b}"
    return f"{a:.2f} → {b:.2f} ({b - a:+.2f}, 95% interval {low:+.2f} to {high:+.2f}, {n}: {verdict})"


def validation_words(validation: Sequence[dict], index: int) -> str | None:
    """What changed in validation after stage `index`, per subset, from that subset's last validation before."""
    after = rows_at(validation, index)
    if not after:
        return None
    changes, unchanged = [], []
    for level in sorted(after, key=level_order):
        row = after[level]
        before = max((r for r in validation if row_level(r) == level and isinstance(r.get("stage"), int)
                      and r["stage"] < index), key=lambda r: r["stage"], default=None)
        if before is not None and before.get("accuracy") == row.get("accuracy"):
            unchanged.append(f"{level} {as_number(row.get('accuracy')):.2f} (n={trials(row, 'accuracy')})")
        else:
            changes.append(f"{level} " + (change_words(before, row) if before else
                                           f"{as_number(row.get('accuracy'))} (its first validation)"))
    if not changes:
        return "validation accuracy unchanged on every subset: " + ", ".join(unchanged)
    same = f"; unchanged: {', '.join(unchanged)}" if unchanged else ""
    return "validation accuracy: " + "; ".join(changes) + same


def stage_words(stage: StageRecord, steps: Sequence[dict], validation: Sequence[dict],
                firsts: dict[str, tuple[int, float]] | None = None) -> str:
    """One stage's paragraph; `firsts`: the run's first value of each collapse signal (`first_values`)."""
    rows = stage_steps(steps, stage.index)
    kind = stage.kind_facts
    done = stage.steps_done or len(rows)
    head = f"**{md_escape(stage.name)}** ({done} {kind.label} step{'s' if done != 1 else ''} of {stage.steps_budget})"
    words = [curve_words(rows, kind.curve, kind.curve)]
    if kind.learns_from_rewards:
        words.append(no_signal_words(rows))
        words += [collapse_words(rows, key, label, (firsts or {}).get(key)) for key, label in COLLAPSE_SIGNALS]
    words.append(validation_words(validation, stage.index))
    said = [w for w in words if w]
    return head + (": " + "; ".join(md_escape(w, line_start=False) for w in said) if said else ": nothing logged yet")


def story_blocks(manifest: dict, steps: Sequence[dict], validation: Sequence[dict]) -> list:
    """"What each stage did": a paragraph per stage that trained or is training, then what they changed together."""
    stages = [s for s in stage_records(manifest)
              if s.index is not None and (s.steps_done or stage_steps(steps, s.index))]
    if not stages:
        return []
    note = ("Read step by step (metrics.jsonl), not as halves; each change in validation with Newcombe's 95% "
            "interval for a difference: a change whose interval holds 0 is within noise. Entropy or mean length "
            f"under {COLLAPSE_SHARE:.0%} of the run's first value, to a stage's last step, is called a collapse.")
    overall = [Text(words) for words in overall_words(steps, validation)]
    firsts = first_values(steps, stage_records(manifest))
    return [Heading("What each stage did"), Text(note, note=True),
            *(Text(stage_words(s, steps, validation, firsts)) for s in stages), *overall]


def span_words(validation: Sequence[dict], first: int, last: int, what: str) -> str | None:
    """Each subset's accuracy from validation `first` to `last` (stage indexes); None when none has both."""
    before, after = rows_at(validation, first), rows_at(validation, last)
    shared = sorted(set(before) & set(after), key=level_order)
    if first >= last or not shared:
        return None
    names = [next(iter(rows.values())).get("stage_name") for rows in (before, after)]
    changes = "; ".join(f"{level} {change_words(before[level], after[level])}" for level in shared)
    return (f"**{md_escape(what)}, from {'after ' if first else ''}{md_escape(names[0])} to after "
            f"{md_escape(names[1])}**: {md_escape(changes, line_start=False)}")


def overall_words(steps: Sequence[dict], validation: Sequence[dict]) -> list[str]:
    """What the stages changed together, from where reinforcement learning began and from the baseline.

    >>> rows = [{"stage": k, "stage_name": n, "level": "2ppl", "accuracy": a, "n": 63}
    ...         for k, n, a in [(0, "baseline", 0.0), (1, "sft", 0.25), (2, "2ppl", 0.3), (3, "3ppl", 0.5)]]
    >>> spans = overall_words([{"stage": 2, "stage_step": 1, "reward": 0.5}], rows)
    >>> [words.split("**: ")[0] for words in spans]
    ['**reinforcement learning, from after sft to after 3ppl', '**the whole run, from baseline to after 3ppl']
    >>> spans[0].split("**: ")[1]
    '2ppl 0.25 → 0.50 (+0.25, 95% interval +0.08 to +0.40, n=63: beyond chance)'
    """
    validated = sorted({r["stage"] for r in validation if isinstance(r.get("stage"), int)})
    rewarded = [int(r["stage"]) for r in steps if isinstance(r.get("stage"), int) and as_number(r.get("reward"))
                is not None]
    if len(validated) < 2:
        return []
    last = validated[-1]
    start = max((i for i in validated if i < min(rewarded)), default=None) if rewarded else None
    spans = [(start, "reinforcement learning")] if start is not None else []
    spans += [(validated[0], "the whole run")] if start != validated[0] else []
    return [words for first, what in spans if (words := span_words(validation, first, last, what))]


# --- how each stage ended: run.json's `end` and `guard_events` ----------------------------------------------------


def _accuracy_text(end: dict) -> str:
    """The deciding accuracy with its 95% interval and n (the completions of the stage's own subsets)."""
    n = end.get("n")
    return rate_text(as_number(end.get("accuracy")), n if is_int(n) else None)


def promotion_points(manifest: dict) -> list[Event]:
    """Stages that ended on skill, at their last global step.

    >>> stages = [{"name": "2ppl", "global_step_end": 6, "end": {"reason": "threshold", "accuracy": 0.8,
    ...            "n": 100, "threshold": 0.75}}, {"name": "3ppl", "end": {"reason": "budget"}}]
    >>> promotion_points({"stages": stages})
    [Event(step=6, label='2ppl promoted: 0.800 [0.71, 0.87] n=100 >= 0.75', kind='promotion')]
    """
    return [Event(s.global_step_end, f"{s.name} promoted: {_accuracy_text(s.end)} >= {s.end.get('threshold')}",
                  PROMOTION)
            for s in stage_records(manifest)
            if (s.end or {}).get("reason") == "threshold" and as_number(s.global_step_end) is not None]


def guard_events(manifest: dict) -> list[Event]:
    """Every collapse-guard event recorded in run.json, at its global step.

    >>> stage = {"guard_events": [{"global_step": 12, "signal": "length_drop", "value": 0.6, "action": "stop"}]}
    >>> guard_events({"stages": [stage]})
    [Event(step=12, label='length_drop 0.6 (stop)', kind='guard')]
    """
    return [Event(e["global_step"], f"{e.get('signal')} {e.get('value')} ({e.get('action')})", GUARD)
            for s in stage_records(manifest) for e in s.guard_events
            if as_number(e.get("global_step")) is not None]


def end_cells(stage: StageRecord) -> list[str] | None:
    """How a stage ended: why, stage step/budget, the deciding accuracy, threshold, kept step; None: not recorded.

    >>> end_cells(StageRecord(name="2ppl", steps_budget=10, end={"reason": "threshold", "stage_step": 5,
    ...                                                          "accuracy": 0.9, "n": 100, "threshold": 0.8}))
    ['threshold', '5/10', '0.900 [0.83, 0.94] n=100', '0.8', '-']
    """
    end = stage.end
    if not isinstance(end, dict):
        return None
    reason = end.get("reason", "-") + (f" ({end['signal']})" if end.get("signal") else "")
    budget = "-" if stage.steps_budget is None else stage.steps_budget
    return [reason, f"{end.get('stage_step')}/{budget}", _accuracy_text(end),
            "-" if end.get("threshold") is None else str(end["threshold"]), str(end.get("kept_step", "-"))]


def stage_end_blocks(manifest: dict) -> list:
    """How each stage ended, and the collapse guard's events."""
    ends = [[str(stage.name), *cells] for stage in stage_records(manifest) if (cells := end_cells(stage))]
    events = [[str(s.name), *(str(e.get(k)) for k in ("stage_step", "global_step", "signal", "value", "threshold",
                                                     "window", "action"))]
              for s in stage_records(manifest) for e in s.guard_events]
    blocks: list = []
    if ends:
        headers = ["stage", "ended by", "step/budget", "held-out accuracy", "threshold", "weights kept from step"]
        blocks += [Heading("How each stage ended"), Table(headers, ends)]
    if events:
        blocks += [Heading("Collapse guard events"),
                   Table(["stage", "stage step", "global step", "signal", "value", "threshold", "window", "action"],
                         events)]
    return blocks


# --- the history: attempts, resumes, skipped checkpoints, failures, refused finals, warnings -----------------------


def resumes(run_dir: Path) -> list[str]:
    """The times of the resumes recorded in `.hydra/` (each `resume-<time>/`), in order."""
    hydra = run_dir / ".hydra"
    if not hydra.is_dir() or hydra.is_symlink():
        return []
    return sorted(p.name.removeprefix(RESUME_RECORD) for p in hydra.iterdir()
                  if p.name.startswith(RESUME_RECORD) and p.is_dir() and not p.is_symlink())


def retrained(run_dir: Path, index, name) -> bool:
    """Whether the stage's final was refused once (`final.refused`) and it trained again; no link is followed."""
    if not isinstance(index, int) or not isinstance(name, str) or "/" in name or name in (".", ".."):
        return False
    folder = run_dir / STAGES / stage_dirname(index, name)
    return not folder.is_symlink() and (folder / REFUSED_FINAL).is_dir() and not (folder / REFUSED_FINAL).is_symlink()


def _warning_text(warning) -> str:
    if not isinstance(warning, dict):
        return str(warning)
    return " ".join(str(warning[k]) for k in ("reward", "warning") if warning.get(k) is not None) or str(warning)


def history_rows(run_dir: Path, manifest: dict) -> list[list[str]]:
    """One row per event of a stage's history: (stage, what happened, detail)."""
    rows = []
    for stage in stage_records(manifest):
        name = fmt(stage.name)
        if retrained(run_dir, stage.index, stage.name):
            rows.append([name, "retrained", f"its final was refused and set aside as {REFUSED_FINAL}; trained again "
                                            "from the previous stage's final"])
        if stage.resumed_from:
            rows.append([name, "interrupted, resumed", f"continued from {stage.resumed_from}"])
        for skipped in stage.skipped_checkpoints:
            detail = f"{skipped.get('checkpoint')}: {skipped.get('problem')}" if isinstance(skipped, dict) else skipped
            rows.append([name, "checkpoint skipped", str(detail)])
        if stage.status == Status.FAILED or stage.error:
            rows.append([name, "failed", fmt(stage.error)])
        rows += [[name, "warning", _warning_text(w)] for w in stage.warnings]
    return rows


def history_blocks(run_dir: Path, manifest: dict) -> list:
    """The History section: the attempts, then a row per event, or a line saying the run went straight through."""
    times = resumes(run_dir)
    created = manifest.get("created")
    attempts = (f"{len(times) + 1} attempts: started {md_escape(fmt(created))}, resumed "
                f"{', '.join(md_escape(t) for t in times)} (each resume's record: {code('.hydra/resume-<time>/')})"
                if times else f"one attempt, started {md_escape(fmt(created))}: never resumed")
    error = [Text(md_escape(f"the last attempt failed: {manifest['error']}"))] if manifest.get("error") else []
    rows = history_rows(run_dir, manifest)
    events = [Table(["stage", "what happened", "detail"], rows, left=3)] if rows else [
        Text("no stage was interrupted, retrained, failed or warned; no checkpoint was skipped")]
    return [Heading("History"), Text(attempts), *error, *events]
