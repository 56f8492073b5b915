"""The reference model, said plainly: which checkpoint each stage's KL is measured against.

previous_stage and base are covered on full weights by tests/runs/test_ladder.py and test_learning.py;
here: rl_start after an SFT cold start, a LoRA ladder (the reference is the merged previous final,
the policy with its adapters off) and beta 0 (no reference at all, recorded as such).
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from transformers import AutoModelForCausalLM

from core.rundir.files import read_jsonl
from core.weights import fingerprint
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

TWO_STAGES = "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 8}, {name: b, ppl: 3, steps: 2, pool: 8}]"


def _final(run_dir, stage: dict) -> str:
    return fingerprint(AutoModelForCausalLM.from_pretrained(run_dir / stage["checkpoint"], dtype=torch.float32))


def _first_kl(run_dir, stage: int) -> float:
    return next(r["kl"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step" and r["stage"] == stage)


def test_lora_reference_is_the_merged_previous_final(tmp_path, make_cfg):
    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", TWO_STAGES,
                   "model.lora={r: 4, alpha: 8, dropout: 0.0, learning_rate: 1.0e-2}", "eval.n=2")
    run_curriculum(read_settings(cfg), run_dir)
    first, second = json.loads((run_dir / "run.json").read_text())["stages"]
    merged = _final(run_dir, first)
    assert merged != first["policy_fingerprint"], "the merged adapters changed the weights"
    assert second["policy_fingerprint"] == merged
    assert second["reference_fingerprint"] == merged
    assert _first_kl(run_dir, 2) == 0.0


def test_rl_start_is_the_sft_checkpoint_for_every_grpo_stage(tmp_path, make_cfg):
    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_r1", "experiment=smoke", "reference=rl_start", "eval.n=2",
                   "curriculum.stages=[{name: sft, kind: sft, ppl: 2, steps: 2, pool: 8},"
                   " {name: a, ppl: 2, steps: 2, pool: 8}, {name: b, ppl: 3, steps: 2, pool: 8}]")
    run_curriculum(read_settings(cfg), run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    sft, first, second = manifest["stages"]
    assert manifest["reference"] == "rl_start" and sft["reference"] is None
    sft_weights = _final(run_dir, sft)
    assert first["reference_fingerprint"] == second["reference_fingerprint"] == sft_weights
    assert second["policy_fingerprint"] == _final(run_dir, first) != sft_weights
    assert _first_kl(run_dir, 3) > 0, "stage b starts from stage a's final, away from the SFT reference"


def test_beta_zero_warns_and_records_no_reference(tmp_path, make_cfg, caplog):
    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", TWO_STAGES, "grpo.beta=0",
                   "eval.n=2")
    with caplog.at_level(logging.WARNING):
        run_curriculum(read_settings(cfg), run_dir)
    assert "beta is 0, so TRL loads no reference model" in caplog.text
    for stage in json.loads((run_dir / "run.json").read_text())["stages"]:
        assert stage["reference"] is None and stage["reference_fingerprint"] is None
