"""A real `python -m train` killed with SIGKILL mid-stage, then resumed with `resume=<run dir>`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from tests.conftest import ROOT, run_cli
from train.checkpoints import fingerprint
from train.manifest import read_jsonl

SMOKE = ["+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=3"]


def _wait_for_stage_step(metrics: Path, proc, stage: int, step: int, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        rows = read_jsonl(metrics) if metrics.exists() else []
        if any(r["stage"] == stage and r.get("stage_step", 0) >= step for r in rows):
            return
        time.sleep(0.05)
    raise TimeoutError(f"stage {stage} never reached step {step}")


def test_sigkill_mid_stage_then_resume(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    common = [*SMOKE, f"paths.cache_dir={cache_dir}"]
    proc = subprocess.Popen([sys.executable, "-m", "train", *common, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        _wait_for_stage_step(run_dir / "metrics.jsonl", proc, stage=3, step=2)
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
    assert sorted(validation) == sorted(set(validation)) and len(validation) == 6 * 2


def test_second_run_on_a_live_run_directory_is_refused(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / "run.lock").write_text(str(holder.pid))
        refused = run_cli("train", *SMOKE, f"paths.cache_dir={cache_dir}", f"resume={run_dir}")
        assert refused.returncode != 0
        assert "already running" in refused.stderr
    finally:
        holder.kill()
        holder.wait()
    # the holder is dead now: its lock is stale and is taken over
    taken = run_cli("train", *SMOKE, f"paths.cache_dir={cache_dir}", f"resume={run_dir}", "limits.max_steps=1")
    assert taken.returncode == 0, taken.stderr[-3000:]
