"""In-stage validation (`eval.every`) observes training; it must not change it."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from core.rundir.files import read_jsonl
from core.weights import fingerprint
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

STAGES = "curriculum.stages=[{name: a, ppl: 2, steps: 3, pool: 8}, {name: b, ppl: 3, steps: 3, pool: 8}]"


def _finals(run_dir) -> list[str]:
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    return [fingerprint(AutoModelForCausalLM.from_pretrained(run_dir / s["checkpoint"], dtype=torch.float32))
            for s in stages]


def test_validating_every_step_leaves_the_trained_weights_bit_identical(tmp_path, make_cfg):
    runs = {}
    for every in (0, 1):
        run_dir = tmp_path / f"every{every}"
        run_curriculum(read_settings(make_cfg("+curriculum=kk_ladder", "experiment=smoke", "limits.max_steps=3",
                                STAGES, "cpu_threads=1", f"eval.every={every}")), run_dir)
        runs[every] = run_dir
    rows = [(r["stage"], r["stage_step"], r["ppl"]) for r in read_jsonl(runs[1] / "validation_steps.jsonl")]
    assert sorted(rows) == [(1, 1, 2), (1, 2, 2), (2, 1, 3), (2, 2, 3)], "validated at steps 1 and 2, once each"
    assert _finals(runs[1]) == _finals(runs[0])
