"""Tests of the run/sweep report (eval/report*.py) on hand-made run and sweep directories.

The fixture run is a curriculum caught mid-way: stage 1 (2ppl) done at global steps 0..3,
stage 2 (3ppl) running with 2 of its steps logged, stage 3 (4ppl) pending, `kl` never logged
(beta=0), and a torn last line in metrics.jsonl, as a kill or a reader racing the writer leaves it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from curriculum.tasks.kk import KKTask
from eval.report import cli as report
from eval.report import jobs as js
from eval.report import series as rs
from eval.report.blocks import Table
from eval.report.cli import latest_output, main, write_report
from eval.report.sweep import sweep_report

TRACEBACK = """Traceback (most recent call last):
  File "train/__main__.py", line 31, in main
    return run_curriculum(cfg, run_dir)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
curriculum.plan.ConfigError: grpo.num_generations: 3 does not divide the generation batch 4
"""


#: What a K&K run records in run.json of how its report shows the task (train/run/runner.py)
KK_REPORT = KKTask.report.as_json()


def write_jsonl(path: Path, rows: list[dict], torn: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)


def stage_entry(index: int, ppl: int, status: str, start: int | None = None, end: int | None = None) -> dict:
    return {"index": index, "name": f"{ppl}ppl", "level_label": f"{ppl}ppl", "status": status, "steps_budget": 4,
            "steps_done": 0 if end is None else end - start, "global_step_start": start,
            "global_step_end": end, "final_metrics": {}}


def step_row(stage: int, ppl: int, stage_step: int, global_step: int, **extra) -> dict:
    return {"stage": stage, "stage_name": f"{ppl}ppl", "level": f"{ppl}ppl", "stage_step": stage_step,
            "global_step": global_step, "kind": "step", "reward": 0.1 * global_step,
            "rewards/format/mean": 0.5, "rewards/answer/mean": 0.2,
            "completions/mean_length": 100.0 + global_step, "completions/min_length": 50.0,
            "completions/max_length": 200.0, "completions/clipped_ratio": 0.1, "entropy": 0.9,
            "frac_reward_zero_std": 0.25, **extra}


def val_row(stage: int, name: str, step: int, ppl: int, accuracy: float, tokens: float) -> dict:
    return {"stage": stage, "stage_name": name, "global_step": step, "level": f"{ppl}ppl", "ppl": ppl,
            "accuracy": accuracy, "format_rate": 0.5, "mean_tokens": tokens, "n": 4}


@pytest.fixture
def partial_run(tmp_path) -> Path:
    run = tmp_path / "runs" / "partial"
    run.mkdir(parents=True)
    manifest = {"status": "running", "curriculum": "kk_ladder", "baseline": {}, "task_report": KK_REPORT,
                "stages": [stage_entry(1, 2, "done", 0, 3), stage_entry(2, 3, "running", 3),
                           stage_entry(3, 4, "pending")]}
    (run / "run.json").write_text(json.dumps(manifest))
    (run / "config.yaml").write_text("objective: mean_final_accuracy\n")
    steps = [step_row(1, 2, k, k) for k in (1, 2, 3)]
    summary = {"stage": 1, "stage_name": "2ppl", "level": "2ppl", "stage_step": 3, "global_step": 3,
               "kind": "summary", "train_runtime": 1.0}
    write_jsonl(run / "metrics.jsonl", [*steps, summary, step_row(2, 3, 1, 4), step_row(2, 3, 2, 5)],
                torn='{"stage": 2, "stage_step": 3, "glo')
    write_jsonl(run / "validation.jsonl", [
        val_row(0, "baseline", 0, 2, 0.1, 300.0), val_row(0, "baseline", 0, 3, 0.0, 350.0),
        val_row(1, "2ppl", 3, 2, 0.6, 250.0), val_row(1, "2ppl", 3, 3, 0.2, 320.0)])
    return run


def test_load_run_skips_the_torn_line_and_the_summary_rows(partial_run):
    run = rs.load_run(partial_run)
    assert [r["global_step"] for r in run.steps] == [1, 2, 3, 4, 5]
    assert any("metrics.jsonl: skipped 1" in note for note in run.notes)
    lengths = rs.step_series(run.steps, "completions/mean_length")
    assert lengths.x == [1, 2, 3, 4, 5] and lengths.y == [101.0, 102.0, 103.0, 104.0, 105.0]


def test_stage_boundaries_at_each_started_stage_global_step_start(partial_run):
    run = rs.load_run(partial_run)
    # between the last step of one stage and the first of the next; stage 3 is pending: no boundary
    expected = [rs.Boundary(0.5, "2ppl"), rs.Boundary(3.5, "3ppl")]
    assert rs.stage_boundaries(run.manifest, run.steps) == expected
    # without run.json the starts come from global_step - stage_step of the metrics rows
    assert rs.stage_boundaries({}, run.steps) == expected


def test_validation_series_one_per_ppl_with_the_baseline_first(partial_run):
    run = rs.load_run(partial_run)
    points = rs.validation_points(run.validation, "mean_tokens")
    assert [(s.label, s.x, s.y) for s in points] == [("2ppl", [0, 3], [300.0, 250.0]),
                                                     ("3ppl", [0, 3], [350.0, 320.0])]
    plotted = rs.stage_grid(run.validation, "accuracy")
    assert plotted.stages == ["baseline", "2ppl"] and plotted.levels == ["2ppl", "3ppl"]
    assert plotted.values == {"2ppl": [0.1, 0.6], "3ppl": [0.0, 0.2]}
    table = rs.stage_grid(run.validation, "accuracy", rs.planned_stages(run.manifest))
    assert table.stages == ["baseline", "2ppl", "3ppl", "4ppl"]  # stages still to come, as gaps
    assert table.values["2ppl"] == [0.1, 0.6, None, None]


def test_reward_series_total_then_components_and_missing_keys_are_none(partial_run):
    run = rs.load_run(partial_run)
    assert [s.label for s in rs.reward_series(run.steps)] == ["total", "format", "answer"]
    assert rs.step_series(run.steps, "kl") is None


def make_job(sweep: Path, num: int, overrides: list[str], *, manifest: dict | None = None,
             error: str | None = None) -> Path:
    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if manifest is not None:
        (job / "run.json").write_text(json.dumps({"task_report": KK_REPORT, **manifest}))
        (job / "config.yaml").write_text("objective: mean_final_accuracy\n")
    if error is not None:
        (job / "error.txt").write_text(error)
    return job


def done_manifest(accuracy: dict[str, float]) -> dict:
    final = {k: {"accuracy": v} for k, v in accuracy.items()}
    last = {**stage_entry(1, 2, "done", 0, 4), "final_metrics": final}
    # the objective the job returned (mean_final_accuracy), as a run records it
    return {"status": "done", "stages": [last], "objective": sum(accuracy.values()) / len(accuracy)}


def done_validation(job: Path, accuracy: dict[str, float], n: int = 4) -> None:
    """The validation.jsonl that goes with `done_manifest`: each subset after stage 1, over `n` puzzles."""
    write_jsonl(job / "validation.jsonl", [{"stage": 1, "stage_name": "2ppl", "global_step": 4, "level": k,
                                            "accuracy": v, "n": n} for k, v in accuracy.items()])


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Two jobs over reward.weights.format: 0 finished, 1 failed in its config check (no run.json)."""
    sweep = tmp_path / "multirun" / "2026-01-01_00-00-00"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    fixed = ["+curriculum=kk_ladder", "experiment=smoke"]
    job = make_job(sweep, 0, [*fixed, "reward.weights.format=0.5"],
                   manifest=done_manifest({"2ppl": 0.5, "3ppl": 0.25}))
    done_validation(job, {"2ppl": 0.5, "3ppl": 0.25})
    make_job(sweep, 1, [*fixed, "reward.weights.format=1.0"], error=TRACEBACK)
    return sweep


def test_sweep_jobs_table_with_a_failed_job(sweep):
    jobs = js.load_sweep(sweep)
    assert [(j.name, j.status) for j in jobs] == [("0", "done"), ("1", "failed")]
    assert js.swept_params(jobs) == ["reward.weights.format"]
    assert jobs[0].final_accuracy == {"2ppl": 0.5, "3ppl": 0.25} and jobs[0].objective == 0.375
    assert jobs[1].objective is None and jobs[1].final_accuracy == {}
    assert jobs[1].error.startswith("curriculum.plan.ConfigError: grpo.num_generations: 3")
    title, blocks = sweep_report(sweep, sweep / "report")
    table = [b for b in blocks if isinstance(b, Table)][-1]
    assert table.headers[:3] == ["job", "reward.weights.format", "status"]
    # every accuracy with its 95% interval and n: 4 puzzles a subset, 8 behind the mean; the one finished job is best
    assert table.rows[0][:8] == ["0 (best)", "0.5", "done", "1/1", "0.375", "0.375 [0.14, 0.69] n=8",
                                 "0.500 [0.15, 0.85] n=4", "0.250 [0.05, 0.70] n=4"]
    assert table.rows[1][2] == "failed" and table.rows[1][-1].startswith("curriculum.plan.ConfigError")
    assert (sweep / "report" / "sweep_accuracy.png").exists()  # one parameter: accuracy vs its values


def embedded_images(html: str) -> list[str]:
    return re.findall(r"<img [^>]*src='([^']*)'", html)


def test_whole_run_report_writes_markdown_html_and_pngs(partial_run):
    out = write_report(partial_run)
    pngs = sorted(p.name for p in out.glob("*.png"))
    # no TRL curve (loss, grad_norm, kl...) nor num_tokens logged in the fixture: no curves or throughput figure
    assert pngs == ["accuracy.png", "collapse.png", "format.png", "length.png", "length_per_stage.png", "reward.png"]
    for png in pngs:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "report.md").read_text()
    assert all(f"]({png})" in markdown for png in pngs)
    assert "| after stage | 2ppl | 3ppl |" in markdown
    # each accuracy with its 95% Wilson interval and n; 0.1 -> 0.6 of 4 puzzles is within noise: no mark
    assert "| 2ppl | 0.600 [0.20, 0.90] n=4 | 0.200 [0.03, 0.66] n=4 |" in markdown
    assert "| 4ppl | - | - |" in markdown  # the pending stage is a row of gaps
    assert "no numeric `kl` in metrics.jsonl" in markdown  # the missing panel is a note, not an error
    html = (out / "report.html").read_text()
    sources = embedded_images(html)
    assert len(sources) == len(pngs) and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "http" not in html  # self-contained: no external asset


def test_report_of_a_run_with_almost_nothing_never_raises(tmp_path):
    """A torn run.json, a step row without rewards or lengths, a NaN entropy: notes, and only the loss drawn."""
    run = tmp_path / "fresh"
    run.mkdir()
    (run / "run.json").write_text('{"status": "runn')
    write_jsonl(run / "metrics.jsonl", [{"stage": 1, "stage_step": 1, "global_step": 1, "kind": "step",
                                         "loss": 0.1, "entropy": float("nan")}])
    out = write_report(run)
    markdown = (out / "report.md").read_text()
    for expected in ("run.json is missing or unreadable", "no rows in validation.jsonl yet",
                     "reward plot skipped", "length plot skipped", "no numeric `entropy`", "no numeric `kl`"):
        assert expected in markdown
    assert [p.name for p in out.glob("*.png")] == ["training_curves.png"]  # the one curve logged: loss
    assert (out / "report.html").read_text().count("<img") == 1


def test_two_swept_parameters_make_a_heatmap(tmp_path):
    sweep = tmp_path / "sweep"
    for num, (fmt_weight, answer, acc) in enumerate([("0", "1", 0.2), ("0.5", "1", 0.4), ("0", "2", 0.6)]):
        job = make_job(sweep, num, [f"reward.weights.format={fmt_weight}", f"reward.weights.answer={answer}"],
                       manifest=done_manifest({"2ppl": acc}))
        done_validation(job, {"2ppl": acc})
    out = write_report(sweep)
    assert (out / "sweep_accuracy.png").exists()
    # the heatmap, and the jobs' accuracy-per-stage and length curves overlaid
    assert len(embedded_images((out / "report.html").read_text())) == 2


def test_latest_output_is_the_newest_run_or_sweep_and_the_cli_prints_where(tmp_path, capsys):
    old_run, sweep = tmp_path / "runs" / "old", tmp_path / "multirun" / "new"
    (old_run).mkdir(parents=True)
    (old_run / "config.yaml").write_text("seed: 1\n")
    make_job(sweep, 0, ["reward.weights.format=0"])
    os.utime(old_run / "config.yaml", (1e9, 1e9))
    assert latest_output(tmp_path) == sweep
    write_report(old_run)  # reporting on the older run must not make it the latest
    assert latest_output(tmp_path) == sweep
    assert main(["--outputs", str(tmp_path)]) == sweep / "report"
    printed = capsys.readouterr().out
    assert str(sweep / "report") in printed and "report.md" in printed and "report.html" in printed
    with pytest.raises(SystemExit, match="no run or sweep"):
        main(["--outputs", str(tmp_path / "empty")])


def test_the_report_says_when_ratio_clipping_never_acted():
    """One optimizer step per generation batch: the ratio is 1, clip-higher is inert, and the report says so."""
    from eval.report.training import ratio_clipping_note

    assert ratio_clipping_note([{"clip_ratio/region_mean": 0.0}] * 3)
    assert not ratio_clipping_note([{"clip_ratio/region_mean": 0.0}, {"clip_ratio/region_mean": 0.02}])
    assert not ratio_clipping_note([{"loss": 1.0}]), "nothing to say when TRL logged no clip ratio"



def test_without_a_root_the_report_searches_the_configs_output_dir(tmp_path, monkeypatch, partial_run):
    """`python -m eval.report` with no arguments finds runs where `python -m train` put them: paths.output_dir."""
    conf = tmp_path / "conf"
    shutil.copytree(report.CONF_DIR, conf)
    (conf / "paths" / "default.yaml").write_text(f"output_dir: {tmp_path / 'elsewhere'}\ncache_dir: {tmp_path}\n")
    monkeypatch.setattr(report, "CONF_DIR", conf)
    shutil.copytree(partial_run, tmp_path / "elsewhere" / "runs" / "mine")
    assert main([]) == tmp_path / "elsewhere" / "runs" / "mine" / "report"
