"""A run's report tells its story: what each stage trained, read step by step (a rise then a fall is not
"rises"), the steps without signal, the change in validation with its interval, chance on the accuracy
plot; a failed run leads with its error; a folder that is no run is refused, naming the runs inside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.report.cli import main, write_report
from tests.report.test_report import KK_REPORT, TRACEBACK, stage_entry, step_row, val_row, write_jsonl

# a demo run's 2ppl stage: up to 1.50 at step 5, then down every step
DEMO_REWARDS = [0.58, 0.90, 1.10, 1.30, 1.50, 1.22, 1.00, 0.625]


@pytest.fixture
def demo_like(tmp_path) -> Path:
    """Two GRPO stages: 2ppl (8 steps, the demo's curve, signal in every step), 6ppl (1 step, no signal)."""
    run = tmp_path / "run"
    run.mkdir()
    stages = [stage_entry(1, 2, "done", 0, 8), stage_entry(2, 6, "done", 8, 9)]
    stages[0]["steps_budget"], stages[1]["steps_budget"] = 8, 1
    (run / "run.json").write_text(json.dumps({"status": "done", "curriculum": "kk_ladder", "stages": stages,
                                                   "task_report": KK_REPORT}))
    (run / "config.yaml").write_text("objective: mean_final_accuracy\n")
    steps = [step_row(1, 2, k, k, reward=r) for k, r in enumerate(DEMO_REWARDS, start=1)]
    steps.append(step_row(2, 6, 1, 9, reward=0.3, frac_reward_zero_std=1.0, loss=0.0))
    write_jsonl(run / "metrics.jsonl", steps)
    write_jsonl(run / "validation.jsonl", [
        val_row(0, "baseline", 0, 2, 0.0, 160.0), val_row(0, "baseline", 0, 3, 0.0, 160.0),
        val_row(1, "2ppl", 8, 2, 0.5, 114.0), val_row(1, "2ppl", 8, 3, 0.0, 135.0),
        val_row(2, "6ppl", 9, 2, 0.5, 95.0), val_row(2, "6ppl", 9, 3, 0.0, 97.0)])
    return run


def story(report: str) -> list[str]:
    section = report.split("## What each stage did")[1].split("\n## ")[0]
    return [line for line in section.splitlines() if line.startswith("**")]


def test_each_stage_says_what_it_trained_step_by_step_and_what_changed(demo_like):
    report = (write_report(demo_like) / "report.md").read_text()
    first, last, overall = story(report)
    # the peak and the end, not halves: 0.58 at step 1, peak 1.50 at step 5, 0.625 at the end
    assert first.startswith("**2ppl** (8 GRPO steps of 8): reward 0.580 at step 1, peak 1.500 at step 5, "
                            "0.625 at its last step (8); every one of its 8 steps had signal")
    # 0/4 -> 2/4 puzzles is within noise, and the report says so with the interval
    assert "validation accuracy: 2ppl 0.00 → 0.50 (+0.50, 95% interval -0.10 to +0.85, n=4: within noise); " \
           "unchanged: 3ppl 0.00 (n=4)" in first
    # a stage without signal says so, and a validation equal to the one before it says that too
    assert last.startswith("**6ppl** (1 GRPO step of 1): reward 0.300 (one step); no step had signal")
    assert "validation accuracy unchanged on every subset: 2ppl 0.50 (n=4), 3ppl 0.00 (n=4)" in last
    # and what the stages did together, from where reinforcement learning began (no cold start: the baseline)
    assert overall == ("**reinforcement learning, from baseline to after 6ppl**: 2ppl 0.00 → 0.50 (+0.50, 95% interval "
                       "-0.10 to +0.85, n=4: within noise); 3ppl 0.00 → 0.00 (+0.00, 95% interval -0.49 to +0.49, "
                       "n=4: within noise)")


def test_a_failed_run_leads_with_its_error(demo_like):
    (demo_like / "error.txt").write_text(TRACEBACK)
    report = (write_report(demo_like) / "report.md").read_text()
    sections = report.split("\n## ")[1:]  # after the title and the contents, which list the same order
    assert sections[0].startswith("This run failed")
    assert "ConfigError: grpo.num_generations: 3 does not divide the generation batch 4" in sections[0]
    assert "- [This run failed](#this-run-failed)" in report.split("\n## ")[0]


def test_a_run_that_failed_before_its_manifest_is_still_a_run_and_shows_its_error(tmp_path):
    run = tmp_path / "runs" / "failed"
    (run / ".hydra").mkdir(parents=True)
    (run / "error.txt").write_text(TRACEBACK)
    main([str(run)])
    assert (run / "report" / "report.md").read_text().split("\n## ")[1].startswith("This run failed")


def test_a_folder_that_is_no_run_is_refused_naming_the_runs_inside(tmp_path, demo_like):
    outputs = tmp_path / "outputs"
    (outputs / "runs" / "a").mkdir(parents=True)
    (outputs / "runs" / "a" / "run.json").write_text("{}")
    (outputs / "multirun" / "s").mkdir(parents=True)
    (outputs / "multirun" / "s" / "multirun.yaml").write_text("{}")
    with pytest.raises(SystemExit) as refused:
        main([str(outputs)])
    message = str(refused.value)
    assert message.startswith(f"{outputs}: not a run, sweep or python -m eval folder (no run.json, no multirun.yaml, "
                              "no evaluation.json); runs and sweeps inside it, newest first: ")
    assert str(outputs / "runs" / "a") in message and str(outputs / "multirun" / "s") in message
    assert not (outputs / "report").exists(), "nothing written into a folder that is no run"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no run or sweep inside it either"):
        main([str(empty)])


def test_the_accuracy_plot_draws_chance_for_each_subset(demo_like, monkeypatch):
    from eval.report import plots

    drawn = []
    real = plots.Figure.subplots

    def recording_subplots(fig, *args, **kwargs):
        axes = real(fig, *args, **kwargs)
        for ax in axes.flat:
            original = ax.axhline
            ax.axhline = lambda y, *a, _orig=original, **k: drawn.append((y, k.get("label"))) or _orig(y, *a, **k)
        return axes

    monkeypatch.setattr(plots.Figure, "subplots", recording_subplots)
    write_report(demo_like)
    assert (0.25, "chance 2ppl (1/4)") in drawn and (0.125, "chance 3ppl (1/8)") in drawn
