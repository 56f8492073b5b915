"""The report's promotion points, guard events and a sweep's overlaid curricula, on hand-made run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.report import series as rs
from eval.report import story as ra
from eval.report import write_report
from tests.report.test_report import KK_REPORT, make_job, stage_entry, step_row, write_jsonl

PROMOTED = {"reason": "threshold", "stage_step": 3, "accuracy": 0.85, "n": 100, "threshold": 0.8, "checks": []}
STOPPED = {"reason": "guard", "signal": "length_drop", "stage_step": 4, "accuracy": 0.1, "n": 100,
           "threshold": None, "kept_step": 2, "checks": []}
EVENT = {"stage": 2, "stage_step": 4, "global_step": 7, "signal": "length_drop", "value": 0.62, "threshold": 0.5,
         "window": 2, "action": "stop"}


@pytest.fixture
def adaptive_run(tmp_path) -> Path:
    """Stage 1 promoted at its step 3 (of 4); stage 2 stopped by the guard at its step 4."""
    run = tmp_path / "run"
    run.mkdir()
    stages = [{**stage_entry(1, 2, "done", 0, 3), "end": PROMOTED},
              {**stage_entry(2, 3, "done", 3, 7), "end": STOPPED, "guard_events": [EVENT]}]
    (run / "run.json").write_text(json.dumps({"status": "done", "baseline": {}, "stages": stages,
                                                   "task_report": KK_REPORT}))
    write_jsonl(run / "metrics.jsonl", [step_row(1, 2, k, k) for k in (1, 2, 3)]
                + [step_row(2, 3, k, 3 + k, **{"completions/distinct_share": 0.5}) for k in (1, 2, 3, 4)])
    return run


def test_events_sit_at_their_global_steps(adaptive_run):
    manifest = json.loads((adaptive_run / "run.json").read_text())
    assert ra.promotion_points(manifest) == [ra.Event(3, "2ppl promoted: 0.850 [0.77, 0.91] n=100 >= 0.8", "promotion")]
    assert ra.guard_events(manifest) == [ra.Event(7, "length_drop 0.62 (stop)", "guard")]


def test_run_report_tables_why_each_stage_ended_and_the_guard_events(adaptive_run):
    markdown = (write_report(adaptive_run) / "report.md").read_text()
    # why, when (of the budget), the deciding accuracy with its sample size, the threshold, the kept step
    assert "| 2ppl | threshold | 3/4 | 0.850 [0.77, 0.91] n=100 | 0.8 | - |" in markdown
    assert "| 3ppl | guard (length_drop) | 4/4 | 0.100 [0.06, 0.17] n=100 | - | 2 |" in markdown
    assert "| 3ppl | 4 | 7 | length_drop | 0.62 | 0.5 | 2 | stop |" in markdown
    # the new per-step metric gets its own collapse panel
    assert "no numeric `completions/distinct_share`" not in markdown


def test_a_run_without_adaptive_stages_has_no_such_sections(adaptive_run):
    manifest = json.loads((adaptive_run / "run.json").read_text())
    for stage in manifest["stages"]:
        stage.pop("end"), stage.pop("guard_events", None)
    (adaptive_run / "run.json").write_text(json.dumps(manifest))
    markdown = (write_report(adaptive_run) / "report.md").read_text()
    assert "How each stage ended" not in markdown and "Collapse guard events" not in markdown


def test_sweep_report_overlays_each_jobs_accuracy_and_length(tmp_path):
    sweep = tmp_path / "multirun" / "s"
    # (curriculum, [(global step, 2ppl accuracy) of each validation]): a 2-stage ladder, a 1-stage mix
    curricula = [("kk_ladder", [(0, 0.0), (2, 0.5), (4, 0.75)]), ("kk_mixed", [(0, 0.0), (4, 0.25)])]
    curves = []
    for num, (name, points) in enumerate(curricula):
        stages = [stage_entry(k, 2, "done", points[k - 1][0], step) for k, (step, _) in enumerate(points) if k]
        job = make_job(sweep, num, [f"+curriculum={name}", "experiment=smoke"],
                       manifest={"status": "done", "stages": stages})
        rows = [{"stage": k, "global_step": step, "level": "2ppl", "accuracy": acc, "n": 4} for k, (step, acc) in
                enumerate(points)]
        write_jsonl(job / "validation.jsonl", rows)
        write_jsonl(job / "metrics.jsonl", [step_row(1, 2, k, k) for k in (1, 2, 3, 4)])
        curves.append(rs.accuracy_curve(rows, name, ["2ppl"]))
    # different stage counts, one axis: the global step where each validation happened
    assert [(c.x, c.y) for c in curves] == [([0, 2, 4], [0.0, 0.5, 0.75]), ([0, 4], [0.0, 0.25])]
    assert curves[1].low == [0.0, 0.0456] and curves[1].high == [0.4899, 0.6994]  # 95% over 4 puzzles
    out = write_report(sweep)
    assert (out / "sweep_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "](sweep_curves.png)" in (out / "report.md").read_text()
