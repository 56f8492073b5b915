"""The whole smoke ladder on the tiny model, in process: stages, handoff, reference refresh, records."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from core.rundir.files import read_jsonl
from core.weights import fingerprint
from tests.conftest import compose_cfg
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run


def _fingerprint_of(path) -> str:
    return fingerprint(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32))


@pytest.fixture(scope="module")
def ladder_runs(smoke_ladder, tmp_path_factory, cache_dir):
    """The session's smoke ladder (reference refresh on, validation plan near: the default) and one more with
    refresh off that validates every subset after every stage (eval.subsets_after_stage=all)."""
    runs = {}
    run_dir, objective = smoke_ladder
    runs[True] = (run_dir, json.loads((run_dir / "run.json").read_text()), objective)
    off_dir = tmp_path_factory.mktemp("ladder-refresh-off")
    objective = run_curriculum(read_settings(compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke",
                                           "reference=base", "eval.subsets_after_stage=all")), off_dir)
    runs[False] = (off_dir, json.loads((off_dir / "run.json").read_text()), objective)
    return runs


def test_every_stage_done_with_a_loadable_final(ladder_runs):
    run_dir, manifest, objective = ladder_runs[True]
    assert manifest["status"] == "done"
    assert [s["status"] for s in manifest["stages"]] == ["done"] * 5
    for stage in manifest["stages"]:
        final = run_dir / "stages" / f"{stage['index']}-{stage['name']}" / "final"
        assert stage["checkpoint"] == f"stages/{stage['index']}-{stage['name']}/final"
        assert (final / "config.json").exists() and (final / "tokenizer_config.json").exists()
        assert not (final.parent / "trainer").exists(), "trainer checkpoints are pruned once the final is saved"
    assert (run_dir / "config.yaml").exists()
    assert 0.0 <= objective <= 1.0


def test_global_steps_are_contiguous_and_logged_once(ladder_runs):
    run_dir, manifest, _ = ladder_runs[True]
    steps = [r["global_step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert steps == list(range(1, 11))
    assert [(s["global_step_start"], s["global_step_end"]) for s in manifest["stages"]] == [
        (0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert {r["stage"] for r in rows} == {1, 2, 3, 4, 5}
    assert all("reward" in r for r in rows if r["kind"] == "step")


def test_every_step_row_holds_the_process_peak_memory_never_falling(ladder_runs):
    # TRL logs no memory; the peak resident set is the process's, so it can only rise through a run
    rows = [r for r in read_jsonl(ladder_runs[True][0] / "metrics.jsonl") if r["kind"] == "step"]
    peaks = [r["memory/peak_rss_gib"] for r in rows]
    assert len(peaks) == 10 and peaks[0] > 0.1, peaks  # a torch process holding a model: well over 100 MiB
    assert peaks == sorted(peaks), peaks


def test_validation_rows_for_baseline_and_every_stage(ladder_runs):
    """`all`: both subsets after every stage. `near` (the session ladder): both at the baseline and the end,
    in between the stage's own ppl and the next one's among them (3ppl: 3; 4ppl and 5ppl: neither, so both)."""
    every = [(k, p) for k in range(6) for p in (2, 3)]
    rows = read_jsonl(ladder_runs[False][0] / "validation.jsonl")
    assert sorted((r["stage"], r["ppl"]) for r in rows) == every
    rows = read_jsonl(ladder_runs[True][0] / "validation.jsonl")
    assert sorted((r["stage"], r["ppl"]) for r in rows) == [cell for cell in every if cell != (2, 2)]


def test_handoff_with_reference_refresh(ladder_runs):
    """Stage k starts from stage k-1's final; its reference model holds those same weights."""
    run_dir, manifest, _ = ladder_runs[True]
    base = _fingerprint_of(manifest["base_model"])
    previous = base
    for stage in manifest["stages"]:
        assert stage["policy_fingerprint"] == previous
        assert stage["reference_fingerprint"] == previous
        final = _fingerprint_of(run_dir / stage["checkpoint"])
        assert final != stage["policy_fingerprint"], f"stage {stage['name']}: parameters did not change"
        previous = final


def test_handoff_without_reference_refresh(ladder_runs):
    """With reference=base the policy still moves forward but the reference stays the base model."""
    run_dir, manifest, _ = ladder_runs[False]
    base = _fingerprint_of(manifest["base_model"])
    previous = base
    for stage in manifest["stages"]:
        assert stage["policy_fingerprint"] == previous
        assert stage["reference_fingerprint"] == base
        previous = _fingerprint_of(run_dir / stage["checkpoint"])
    assert previous != base


def test_parameters_really_change_within_a_stage(ladder_runs):
    run_dir, manifest, _ = ladder_runs[True]
    first, second = (AutoModelForCausalLM.from_pretrained(run_dir / s["checkpoint"]) for s in manifest["stages"][:2])
    changed = [n for (n, a), (_, b) in zip(first.named_parameters(), second.named_parameters(), strict=True)
               if not torch.equal(a, b)]
    assert len(changed) > len(list(first.parameters())) // 2


def test_wandb_logs_one_offline_run_per_curriculum_run(tmp_path, make_cfg, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "logger=wandb", "limits.max_steps=1",
                   "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}, {name: b, ppl: 3, steps: 1, pool: 8}]")
    run_curriculum(read_settings(cfg), run_dir)
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, "both stages log into one wandb run"
    assert list(runs[0].glob("*.wandb")), "the offline run holds its log file"


def test_kl_is_zero_at_every_stage_start_and_positive_against_the_base(ladder_runs):
    """reference=previous_stage: each stage's first step measures KL to its own starting weights (0);
    reference=base: from stage 2 on the policy starts away from the base it is held to."""
    for refresh, run in ladder_runs.items():
        rows = [r for r in read_jsonl(run[0] / "metrics.jsonl") if r["kind"] == "step"]
        first_kl = {r["stage"]: r["kl"] for r in reversed(rows)}
        if refresh:
            assert set(first_kl.values()) == {0.0}
        else:
            assert first_kl[1] == 0.0 and all(first_kl[k] > 0 for k in range(2, 6))
