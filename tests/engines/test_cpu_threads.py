"""`cpu_threads`: a run's CPU thread count is chosen once (auto: measured at its start), recorded in run.json and
kept by every resume, whatever the machine's load then: another count sums floats in another order (here 3
threads end the smoke ladder's stages on other weights than 1, 2 or 8), so a resume under another count
would not continue the run it resumes."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import TrainerCallback

from core import models
from tests.runs.test_finals import FailInStage
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

TWO_STAGES = ("+curriculum=kk_ladder", "experiment=smoke",
              "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 8}, {name: b, ppl: 3, steps: 2, pool: 8}]")


class ThreadsPerStage(TrainerCallback):
    """Records torch's threads as each stage starts training; the machine's load "falls" after the first."""

    def __init__(self, load: dict | None = None):
        self.load, self.threads = load if load is not None else {}, []

    def on_train_begin(self, args, state, control, **kwargs):
        self.threads.append(torch.get_num_threads())

    def on_train_end(self, args, state, control, **kwargs):
        self.load["busy"] = False


def recorded(run_dir) -> tuple[int, list]:
    manifest = json.loads((run_dir / "run.json").read_text())
    return manifest["cpu_threads"], [s["final_fingerprints"] for s in manifest["stages"]]


def test_auto_is_measured_once_at_the_start_and_kept_for_the_run(make_cfg, tmp_path, monkeypatch):
    if torch.cuda.is_available() or models.DEFAULT_CPU_THREADS < 2:
        pytest.skip("auto picks among a CPU's threads: needs a CPU machine with more than one core")
    # under load one thread wins by far (a multi-threaded op waits for busy cores); idle, all of them win
    load = {"busy": True}
    timings = {True: {"many": 1.0, "one": 0.1}, False: {"many": 0.1, "one": 0.2}}
    monkeypatch.setattr(models, "_small_ops_seconds",
                        lambda threads, repeats=20: timings[load["busy"]]["one" if threads == 1 else "many"])
    seen = ThreadsPerStage(load)
    run_curriculum(read_settings(make_cfg(*TWO_STAGES, "limits.max_steps=1", "cpu_threads=auto")), tmp_path,
                   callbacks=(seen,))
    # measured again before each stage, stage b took both threads once the load fell, and trained other sums
    assert seen.threads == [1, 1]
    assert recorded(tmp_path)[0] == 1


def test_a_resume_under_another_cpu_threads_gives_the_recorded_runs_finals(make_cfg, tmp_path):
    whole = tmp_path / "whole"
    run_curriculum(read_settings(make_cfg(*TWO_STAGES, "cpu_threads=1")), whole)
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="a crash in stage 4"):  # FailInStage's words, whichever stage
        run_curriculum(read_settings(make_cfg(*TWO_STAGES, "cpu_threads=1")), run_dir, callbacks=(FailInStage(2),))
    seen = ThreadsPerStage()
    # 3 threads: a count that changes this ladder's weights here, so a resume that took it would differ
    run_curriculum(read_settings(make_cfg(*TWO_STAGES, "cpu_threads=3", f"resume={run_dir}")), run_dir,
                   callbacks=(seen,))
    assert seen.threads == [1], "stage b trained on the run's recorded count, not this resume's"
    assert recorded(run_dir) == recorded(whole) == (1, recorded(whole)[1])
