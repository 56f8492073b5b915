"""Kills in the narrow windows of a stage's end: a real `python -m train` SIGKILLed at an exact point, resumed.

The kill is placed by a driver that wraps one function of the real code and kills its own process
there, so the window is hit every time instead of by timing luck.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from core.rundir.files import read_jsonl
from core.rundir.records import final_info
from core.weights import fingerprint
from tests.conftest import ROOT, run_cli
from tests.drivers import KILL_WHILE_PUBLISHING

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

STAGES = "curriculum.stages=[{name: a, ppl: 2, steps: 3, pool: 8}, {name: b, ppl: 3, steps: 3, pool: 8}]"
COMMON = ["+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=3", STAGES, "cpu_threads=1"]

def _final_weights(run_dir) -> list[str]:
    manifest = json.loads((run_dir / "run.json").read_text())
    return [fingerprint(AutoModelForCausalLM.from_pretrained(run_dir / s["checkpoint"], dtype=torch.float32))
            for s in manifest["stages"]]


def test_a_kill_while_the_final_is_written_publishes_the_checkpoint_at_the_budget(tmp_path, cache_dir):
    common = [*COMMON, f"paths.cache_dir={cache_dir}"]
    reference = tmp_path / "uninterrupted"
    whole = run_cli("train", *common, f"hydra.run.dir={reference}")
    assert whole.returncode == 0, whole.stderr[-3000:]

    run_dir = tmp_path / "killed"
    driver = [sys.executable, "-c", KILL_WHILE_PUBLISHING, "1-a"]
    killed = subprocess.run([*driver, *common, f"hydra.run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert killed.returncode == -9, killed.stderr[-3000:]
    stage_dir = run_dir / "stages" / "1-a"
    assert (stage_dir / "final.tmp").is_dir() and not (stage_dir / "final").exists()
    assert (stage_dir / "trainer" / "checkpoint-3").is_dir(), "the kill came after the last trainer checkpoint"

    resumed = run_cli("train", *common, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    manifest = json.loads((run_dir / "run.json").read_text())
    assert [(s["status"], s["steps_done"]) for s in manifest["stages"]] == [("done", 3), ("done", 3)]
    assert manifest["stages"][1]["global_step_start"] == 3
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["global_step"] for r in rows if r["kind"] == "step"] == list(range(1, 7)), "never past the budget"
    assert sorted(r["stage"] for r in rows if r["kind"] == "summary") == [1, 2], "one summary row per stage"
    validated = [(r["stage"], r["ppl"]) for r in read_jsonl(run_dir / "validation.jsonl")]
    assert sorted(validated) == sorted({(k, p) for k in (0, 1, 2) for p in (2, 3)}), "each validation once"
    for stage in manifest["stages"]:  # run.json agrees with the stage folders
        assert final_info(run_dir / stage["checkpoint"])["steps_done"] == stage["steps_done"]
    assert _final_weights(run_dir) == _final_weights(reference), "bit-identical with an uninterrupted run"
    first = json.loads((reference / "run.json").read_text())["stages"][0]
    assert manifest["stages"][0]["policy_fingerprint"] == first["policy_fingerprint"], "the base, not checkpoint-3"
