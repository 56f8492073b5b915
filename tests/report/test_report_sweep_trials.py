"""A sweep's report as an Optuna study reads it: each trial's weights to 3 significant digits, the best trial
marked (by the study's direction), and every job's training reward per step among the curves."""

from __future__ import annotations

import pytest

from eval.report import jobs as js
from eval.report.blocks import Table, short_number
from eval.report.sweep import sweep_report
from tests.report.test_report import done_manifest, done_validation, make_job, step_row, write_jsonl

# (format weight as Optuna suggests it, final 2ppl accuracy) of three trials
TRIALS = [("0.3745401188473625", 0.25), ("0.9507143064099162", 0.75), ("0.7319939418114051", 0.5)]


def optuna_sweep(root, direction: str | None = None):
    sweep = root / "multirun" / "optuna"
    sweep.mkdir(parents=True)
    sweeper = f"hydra:\n  sweeper:\n    direction: {direction}\n" if direction else "hydra: {}\n"
    (sweep / "multirun.yaml").write_text(sweeper)
    for num, (weight, accuracy) in enumerate(TRIALS):
        job = make_job(sweep, num, [f"reward.weights.format={weight}"],
                       manifest={**done_manifest({"2ppl": accuracy}), "objective": accuracy})
        done_validation(job, {"2ppl": accuracy})
        write_jsonl(job / "metrics.jsonl", [step_row(1, 2, k, k, reward=accuracy * k) for k in (1, 2, 3, 4)])
    make_job(sweep, 3, ["reward.weights.format=0.5"], error="ValueError: bad\n")  # failed: never the best
    return sweep


@pytest.mark.parametrize(("written", "shown"), [
    ("0.3745401188473625", "0.375"),  # Optuna's float: 3 significant digits
    ("0.00012345", "0.000123"),
    ("0.5", "0.5"),  # already short: as written
    ("2.0", "2.0"),  # nothing lost by rounding: as written
    ("1e-05", "1e-05"),
    ("128", "128"),  # a whole number is never rounded
    ("kk_ladder", "kk_ladder"),  # not a number
    ("nan", "nan"),
])
def test_weights_are_shown_to_3_significant_digits(written, shown):
    assert short_number(written) == shown


@pytest.mark.parametrize(("direction", "best"), [
    (None, "1"),  # the basic sweeper's objective is an accuracy: higher is better
    ("maximize", "1"),
    ("minimize", "0"),  # the study's own direction decides
])
def test_the_best_trial_is_marked_in_the_table_the_summary_and_the_curves(tmp_path, direction, best):
    sweep = optuna_sweep(tmp_path, direction)
    jobs = js.load_sweep(sweep)
    assert js.best_job(jobs, js.sweep_direction(sweep)).name == best
    _, blocks = sweep_report(sweep, sweep / "report")
    table = [b for b in blocks if isinstance(b, Table)][-1]
    names = [row[0] for row in table.rows]
    assert names == [f"{n} (best)" if n == best else n for n in ("0", "1", "2", "3")]
    assert [row[1] for row in table.rows] == ["0.375", "0.951", "0.732", "0.5"]  # rounded, never the raw float
    summary = next(b.text for b in blocks if getattr(b, "text", "").startswith("**best job**"))
    weight = {"0": "0.375", "1": "0.951"}[best]
    assert summary.startswith(f"**best job** {best} (") and f"`reward.weights.format={weight}`" in summary
    caption = next(b.caption for b in blocks if getattr(b, "caption", "").startswith("one colour per job"))
    assert "training reward" in caption and f"thicker: the best job, reward.weights.format={weight}" in caption
    assert (sweep / "report" / "sweep_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "0.3745401188473625" not in "".join(str(b) for b in blocks)


def test_without_a_finished_trial_nothing_is_marked_best(tmp_path):
    sweep = tmp_path / "multirun" / "s"
    make_job(sweep, 0, ["reward.weights.format=0.1234567"], error="ValueError: bad\n")
    make_job(sweep, 1, ["reward.weights.format=0.5"], error="ValueError: bad\n")
    _, blocks = sweep_report(sweep, sweep / "report")
    assert any(getattr(b, "text", "") == "**best job** none yet (no job has finished with an objective)"
               for b in blocks)
    table = [b for b in blocks if isinstance(b, Table)][-1]
    assert [row[0] for row in table.rows] == ["0", "1"] and table.rows[0][1] == "0.123"
