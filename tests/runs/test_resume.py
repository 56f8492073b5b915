"""A real `python -m train` killed with SIGKILL mid-stage, then resumed with `resume=<run dir>`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from conf import run_dir as run_dir_of
from core.rundir.files import read_jsonl
from core.weights import fingerprint
from eval.report.jobs import load_job
from tests.conftest import ROOT, run_cli

SMOKE = ["+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=3"]


def _wait_for(path: Path, proc, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended before {path} appeared"
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.run
def test_sigkill_mid_stage_then_resume(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    common = [*SMOKE, f"paths.cache_dir={cache_dir}"]
    proc = subprocess.Popen([sys.executable, "-m", "train", *common, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        # stage 3's first checkpoint complete (its digests are written last), then the run frozen at once: the
        # kill lands mid-stage, and not where checkpoint-2 has replaced it without its digests yet
        _wait_for(run_dir / "stages" / "3-4ppl" / "trainer" / "checkpoint-1" / "checksums.json", proc)
        os.kill(proc.pid, signal.SIGSTOP)
        assert not (run_dir / "stages" / "3-4ppl" / "final").exists(), "stage 3 is mid-way"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    manifest = json.loads((run_dir / "run.json").read_text())
    assert [s["status"] for s in manifest["stages"]][:2] == ["done", "done"]
    assert manifest["stages"][2]["status"] == "running"

    done = run_cli("train", *common, f"resume={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((run_dir / "run.json").read_text())
    assert [s["status"] for s in manifest["stages"]] == ["done"] * 5
    assert manifest["stages"][2]["resumed_from"], "stage 3 continued from its trainer checkpoint"
    second, third = manifest["stages"][1:3]
    handed_off = AutoModelForCausalLM.from_pretrained(run_dir / second["checkpoint"], dtype=torch.float32)
    assert third["policy_fingerprint"] == fingerprint(handed_off), "started from stage 2's final, not its checkpoint"
    steps = [r["global_step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert steps == list(range(1, 16)), "every global step once, in order, across the kill"
    validation = [(r["stage"], r["ppl"]) for r in read_jsonl(run_dir / "validation.jsonl")]
    # each validation once: 6 validations of 2 subsets, less 2ppl after the 3ppl stage (eval.subsets_after_stage
    # near: its own and the next stage's ppl)
    assert sorted(validation) == sorted(set(validation)) and len(validation) == 6 * 2 - 1


ONE_STAGE = [*SMOKE, "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}]"]


# A run that fails after run.json is written (its baseline validation raises), as a sweep job can.
FAIL_IN_VALIDATION = """
import train.run.runner

def broken_validation(*args, **kwargs):
    raise RuntimeError("the validation backend crashed")

train.run.runner.validate = broken_validation
from train.__main__ import main
main()
"""


@pytest.mark.run
def test_a_failed_run_resumed_to_the_end_is_reported_done_without_resume_as_a_parameter(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    common = [*ONE_STAGE, f"paths.cache_dir={cache_dir}"]
    failed = subprocess.run([sys.executable, "-c", FAIL_IN_VALIDATION, *common, f"hydra.run.dir={run_dir}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert failed.returncode != 0 and "validation backend crashed" in (run_dir / "error.txt").read_text()
    resumed = run_cli("train", *common, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    job = load_job(run_dir)
    assert (job.status, job.error) == ("done", None), "the stale error.txt no longer marks it failed"
    assert "resume" not in job.overrides, "the original overrides are kept; the resume records its own"
    assert any("resume=" in line for line in _resume_overrides(run_dir))


def _resume_overrides(run_dir: Path) -> list[str]:
    return [line for path in (run_dir / ".hydra").glob("resume-*/overrides.yaml") for line in path.read_text().split()]


@pytest.mark.run
def test_resume_of_a_path_that_is_no_run_directory_is_refused_before_anything_is_created(tmp_path, cache_dir):
    missing = tmp_path / "no-such-run"
    refused = run_cli("train", *ONE_STAGE, f"paths.cache_dir={cache_dir}", f"resume={missing}")
    assert refused.returncode != 0
    assert f"resume={missing}: does not exist; a run directory holds run.json" in refused.stderr
    assert not missing.exists(), "no fresh ladder started at a mistyped path"


def test_resume_accepts_only_a_run_directory(tmp_path):
    assert run_dir_of(None, "fresh") == "fresh", "no resume: a new directory"
    (tmp_path / "run.json").write_text("{}")
    assert run_dir_of(str(tmp_path), "fresh") == str(tmp_path), "a run directory is continued"
    (tmp_path / "stages").mkdir()
    with pytest.raises(ValueError, match=r"resume=.*stages: is not a run directory; a run directory holds run.json"):
        run_dir_of(str(tmp_path / "stages"), "fresh")
