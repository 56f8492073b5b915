"""The supervised cold start: targets that the grader accepts, drawn from training puzzles only,
and a handoff whose GRPO reference model holds the SFT weights."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM

from core.rundir.files import read_jsonl
from core.weights import fingerprint
from curriculum.plan import build_plan
from curriculum.tasks.kk import canonical_key, generate
from curriculum.tasks.kk.grading.grader import FORMATS, grade
from curriculum.tasks.kk.task import reference_response
from tests.conftest import SHARED_DATA
from tests.pools import held_out_pools, stage_pool
from train.run.runner import run_curriculum
from train.settings import read_settings


def _shared_records():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared K&K records not found at {SHARED_DATA}")
    for path in sorted(SHARED_DATA.glob("*ppl/*.parquet")):
        yield from pq.read_table(path).to_pylist()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_sft_target_from_the_published_records_grades_correct(fmt):
    records = list(_shared_records())
    assert len(records) == 5000
    for r in records:
        g = grade(reference_response(r, fmt), r["names"], r["solution"], fmt=fmt)
        assert g.correct and g.format_ok, (r["index"], g.reasons)


def test_generated_sft_targets_grade_correct_and_flipped_ones_do_not():
    for record in generate(4, 50, seed=3):
        target = reference_response(record, "think_answer")
        assert grade(target, record["names"], record["solution"]).correct
        flipped = [not record["solution"][0], *record["solution"][1:]]
        assert not grade(target, record["names"], flipped).correct


def test_sft_pool_never_holds_a_validation_puzzle(make_cfg):
    cfg = make_cfg("+curriculum=kk_r1", "experiment=smoke", "limits.max_pool=null")
    sft = build_plan(cfg)[0]
    held_out = held_out_pools(cfg, 2, 3)
    with pytest.warns(UserWarning, match="only 399 distinct 2-person puzzles"):  # no cap: it asks for more
        records, removed = stage_pool(cfg, sft, held_out)
    guard = {canonical_key(r.source) for pool in held_out.values() for r in pool}
    assert records and not guard & {canonical_key(r.source) for r in records}
    assert removed > 0, "2ppl puzzles are few: generated train and test overlap, and the overlap is removed"


@pytest.mark.run
def test_sft_stage_hands_off_to_grpo(tmp_path, make_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_r1", "experiment=smoke", "limits.max_sft_steps=4", "logger=wandb")
    run_curriculum(read_settings(cfg), run_dir)
    # wandb: the SFT loss (cross-entropy) under sft/, the GRPO loss under TRL's own key, never one panel of both
    # (tests/runs/test_tracker.py reads the keys of each row)
    record = next(run_dir.glob("wandb/offline-run-*/run-*.wandb")).read_bytes()
    assert b"sft/loss" in record and b"train/loss" in record and b"train/sft/" not in record
    manifest = json.loads((run_dir / "run.json").read_text())
    sft, first_grpo = manifest["stages"][:2]
    assert sft["kind"] == "sft" and sft["status"] == "done" and sft["steps_done"] == 4
    sft_weights = fingerprint(AutoModelForCausalLM.from_pretrained(run_dir / sft["checkpoint"], dtype=torch.float32))
    assert sft_weights != sft["policy_fingerprint"], "SFT changed the weights"
    assert first_grpo["policy_fingerprint"] == sft_weights
    assert first_grpo["reference_fingerprint"] == sft_weights
    stages_validated = {r["stage"] for r in read_jsonl(run_dir / "validation.jsonl")}
    assert stages_validated == set(range(len(manifest["stages"]) + 1))
    sft_rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["stage"] == 1 and r["kind"] == "step"]
    assert [r["global_step"] for r in sft_rows] == [1, 2, 3, 4] and all("loss" in r for r in sft_rows)
