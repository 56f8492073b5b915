"""The curves of a sweep and a comparison compare like with like: a mean over subsets only over the subsets every
validation of every curve has, else one panel per subset with the plan's gaps left as gaps."""

from __future__ import annotations

from pathlib import Path

from eval.report import series as rs
from eval.report import write_report
from eval.report.cli import main
from tests.report.test_report import make_job, stage_entry, step_row, write_jsonl


def validations(plan: list[tuple[int, dict[int, float]]]) -> list[dict]:
    """Validation rows of (global step, {ppl: accuracy}) per validation, stage by stage, n=4 each."""
    return [{"stage": k, "global_step": step, "level": f"{ppl}ppl", "ppl": ppl, "accuracy": accuracy, "n": 4}
            for k, (step, found) in enumerate(plan) for ppl, accuracy in found.items()]


# `near`: every subset at the baseline and the end, the stage's own and the next one's in between
NEAR = validations([(0, {2: 0.0, 3: 0.0, 4: 0.0}), (4, {2: 1.0, 3: 0.5}), (8, {3: 0.5, 4: 0.25}),
                    (12, {2: 0.75, 3: 0.5, 4: 0.25})])
# `all`: every subset every time
ALL = validations([(0, {2: 0.0, 3: 0.0, 4: 0.0}), (4, {2: 0.5, 3: 0.25, 4: 0.0}), (8, {2: 0.5, 3: 0.25, 4: 0.0}),
                   (12, {2: 0.5, 3: 0.5, 4: 0.25})])


# a plan with nothing validated at every point: 2ppl alone after stage 1, 4ppl alone after stage 2
SPARSE = validations([(0, {2: 0.0, 3: 0.0, 4: 0.0}), (4, {2: 0.5}), (8, {4: 0.25}), (12, {2: 0.5, 3: 0.25, 4: 0.25})])


def test_without_a_subset_every_validation_has_each_subset_gets_a_panel_with_its_gaps():
    panels = rs.accuracy_panels([("near", NEAR), ("sparse", SPARSE)])
    assert [title for title, _ in panels] == [f"{p}ppl validation accuracy (a gap: not validated there)"
                                              for p in (2, 3, 4)]
    two, three, four = ({c.label: c.y for c in curves} for _, curves in panels)
    # what a plan left out is a gap in that subset's curve, never a point averaged over the other subsets
    assert two == {"near": [0.0, 1.0, None, 0.75], "sparse": [0.0, 0.5, None, 0.5]}
    assert three == {"near": [0.0, 0.5, 0.5, 0.5], "sparse": [0.0, None, None, 0.25]}
    assert four == {"near": [0.0, None, 0.25, 0.25], "sparse": [0.0, None, 0.25, 0.25]}


def test_a_mean_is_over_the_subsets_every_validation_of_every_curve_has():
    (title, curves), = rs.accuracy_panels([("near", NEAR), ("all", ALL)])  # 3ppl alone is everywhere
    assert title == "mean validation accuracy over 3ppl; left out, not validated at every point: 2ppl, 4ppl"
    assert {c.label: c.y for c in curves} == {"near": [0.0, 0.5, 0.5, 0.5], "all": [0.0, 0.25, 0.25, 0.5]}
    # one run alone: its mean is over 2ppl and 3ppl at every point, with the interval of their 8 puzzles
    (title, (curve,)), = rs.accuracy_panels([("all", [r for r in ALL if r["ppl"] != 4])])
    assert title == "mean validation accuracy over 2ppl, 3ppl" and curve.y == [0.0, 0.375, 0.375, 0.5]
    assert curve.low[1] == 0.1368 and curve.high[1] == 0.6943  # Wilson over 8 puzzles


def test_the_sweep_and_the_comparison_draw_the_curves_and_say_what_they_show(tmp_path):
    sweep = tmp_path / "multirun" / "s"
    for num, rows in enumerate((NEAR, SPARSE)):
        stages = [stage_entry(k, 1 + k, "done", 4 * (k - 1), 4 * k) for k in (1, 2, 3)]
        job = make_job(sweep, num, [f"eval.subsets_after_stage={('near', 'all')[num]}"],
                       manifest={"status": "done", "stages": stages})
        write_jsonl(job / "validation.jsonl", rows)
        write_jsonl(job / "metrics.jsonl", [step_row(1, 2, k, k) for k in (1, 2, 3, 4)])
    markdown = (write_report(sweep) / "report.md").read_text()
    assert "](sweep_curves.png)" in markdown and "else each subset in its own panel, broken where" in markdown
    out = main([str(sweep / "0"), str(sweep / "1"), "--out", str(tmp_path / "cmp")])
    assert (out / "compare_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "broken where a validation left it out" in (Path(out) / "report.md").read_text()
