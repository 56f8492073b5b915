"""Promotion by skill and the collapse guard on the tiny model, through the real runner and TRL."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

from core.rundir.files import read_jsonl
from core.weights import fingerprint
from train.rewards.checks import DISTINCT_KEY
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

LENGTH = "completions/mean_length"


def _manifest(run_dir) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def test_promotion_ends_at_a_reachable_threshold_and_runs_the_budget_otherwise(tmp_path, make_cfg):
    # threshold 0 is reached at the first check (step 2); the random tiny model never reaches 1.0
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=4",
                   "curriculum.stages=[{name: a, ppl: 2, steps: 4, pool: 8, promote: {accuracy: 0, every: 2}},"
                   " {name: b, ppl: 3, steps: 4, pool: 8, promote: {accuracy: 1.0, every: 2, min_steps: 2}}]")
    run_dir = tmp_path / "run"
    run_curriculum(read_settings(cfg), run_dir)
    first, second = _manifest(run_dir)["stages"]
    assert first["end"]["reason"] == "threshold" and first["steps_done"] == 2
    assert (first["end"]["stage_step"], first["end"]["accuracy"], first["end"]["n"]) == (2, 0.0, 4)
    assert second["end"]["reason"] == "budget" and second["steps_done"] == 4
    # the step-2 check decided nothing; step 4 is the budget's end, measured by the stage-end validation
    assert [c["stage_step"] for c in second["end"]["checks"]] == [2]
    assert (second["global_step_start"], second["global_step_end"]) == (2, 6)
    assert all(s["status"] == "done" and (run_dir / s["checkpoint"] / "config.json").exists()
               for s in (first, second))
    steps = [(r["stage"], r["stage_step"], r["ppl"]) for r in read_jsonl(run_dir / "validation_steps.jsonl")]
    assert steps == [(1, 2, 2), (2, 2, 3)]


class CraftedLengths(TrainerCallback):
    """Rewrites the logged mean length (100, then 10: a collapse) before the guard reads it; and fails the
    second stage once, as a kill would, so the run must resume."""

    def __init__(self):
        self.stages_begun = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.stages_begun += 1
        if self.stages_begun == 2:
            raise RuntimeError("simulated crash in stage 2")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and LENGTH in logs:
            logs[LENGTH] = 100.0 if state.global_step == 1 else 10.0


def test_guard_stop_keeps_the_best_validated_weights_and_the_run_resumes(tmp_path, make_cfg):
    overrides = ("+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=4", "eval.every=1",
                 "keep_trainer_checkpoints=true", "grpo.save_total_limit=10",
                 "curriculum.stages=[{name: a, ppl: 2, steps: 4, pool: 8,"
                 " guard: {length_drop: 0.5, window: 1, action: stop}}, {name: b, ppl: 3, steps: 2, pool: 8}]")
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_curriculum(read_settings(make_cfg(*overrides)), run_dir, callbacks=(CraftedLengths(),))
    first = _manifest(run_dir)["stages"][0]
    assert first["status"] == "done" and first["steps_done"] == 2
    assert first["end"]["reason"] == "guard" and first["end"]["signal"] == "length_drop"
    assert [(e["stage_step"], e["signal"], e["value"]) for e in first["guard_events"]] == [(2, "length_drop", 0.9)]
    # both steps were validated at 0 accuracy; the earlier (pre-collapse) step is kept
    assert first["end"]["kept_step"] == 1
    final = run_dir / first["checkpoint"]
    step_one = run_dir / "stages" / "1-a" / "trainer" / "checkpoint-1"
    assert fingerprint(AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)) == fingerprint(
        AutoModelForCausalLM.from_pretrained(step_one, dtype=torch.float32))
    guard_rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"].startswith("guard")]
    assert [(r["stage"], r["stage_step"], r["kind"]) for r in guard_rows] == [(1, 2, "guard:length_drop")]

    run_curriculum(read_settings(make_cfg(*overrides, f"resume={run_dir}")), run_dir)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "done"
    assert manifest["stages"][0]["end"] == first["end"], "the done stage is not trained again"
    assert (manifest["stages"][1]["global_step_start"], manifest["stages"][1]["end"]["reason"]) == (2, "budget")
    step_rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert [r["global_step"] for r in step_rows] == [1, 2, 3, 4]
    assert all(0.0 < r[DISTINCT_KEY] <= 1.0 for r in step_rows), "TRL logs the distinct share every step"


class KillBeforePublish(TrainerCallback):
    """Raises once as training ends, after the stop's checkpoint is saved and before the final is published."""

    def __init__(self):
        self.killed = False

    def on_train_end(self, args, state, control, **kwargs):
        if not self.killed:
            self.killed = True
            raise RuntimeError("killed before the final was published")


def test_a_kill_between_promotion_and_publishing_resumes_to_the_same_end(tmp_path, make_cfg):
    # no periodic checkpoints: the only one is what the stop saved
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=4",
                   "grpo.save_steps=100",
                   "curriculum.stages=[{name: a, ppl: 2, steps: 4, pool: 8, promote: {accuracy: 0, every: 2}}]")
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="killed before"):
        run_curriculum(read_settings(cfg), run_dir, callbacks=(KillBeforePublish(),))
    stage = _manifest(run_dir)["stages"][0]
    assert (stage["status"], stage["end"]["reason"], stage["end"]["stage_step"]) == ("failed", "threshold", 2)
    assert (run_dir / "stages" / "1-a" / "trainer" / "checkpoint-2").is_dir()

    run_curriculum(read_settings(cfg), run_dir)
    stage = _manifest(run_dir)["stages"][0]
    assert (stage["status"], stage["steps_done"], stage["end"]["reason"]) == ("done", 2, "threshold")
    steps = [r["stage_step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert steps == [1, 2], "the resume publishes the stop's checkpoint instead of training on"
