"""Stage kinds: one table the schema's names agree with, each kind's token budget, and SFT with LoRA adapters."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from conf.schema import StageConfig, StageKindName
from core.checks import ConfigError
from core.stage_kinds import STAGE_KIND_FACTS
from core.weights import fingerprint
from tests.conftest import compose_cfg
from train.run.runner import run_curriculum
from train.settings import read_settings
from train.stages.kinds import STAGE_KINDS

SFT_STAGE = "{name: sft, kind: sft, ppl: 2, steps: 2, pool: 8}"


def test_every_kind_the_schema_accepts_has_one_entry():
    assert set(STAGE_KINDS) == {kind.value for kind in StageKindName}
    assert [kind.facts.name for kind in STAGE_KINDS.values()] == list(STAGE_KINDS)
    # the facts the layers below train/ read (the plan, the report) are the trainers' own
    assert {name: kind.facts for name, kind in STAGE_KINDS.items()} == STAGE_KIND_FACTS
    assert [facts.name for facts in STAGE_KIND_FACTS.values() if facts.default] == [StageConfig.kind.value]


TOO_LONG = [
    # prompt + reference completion over sft.max_length: TRL would cut the reference answer off
    (("sft.max_length=64", f"curriculum.stages=[{SFT_STAGE}]"),
     r"^sft.max_length: sft has .* over the SFT budget of 64"),
    # the same budget set in the stage's overrides is named there
    (("curriculum.stages=[{name: sft, kind: sft, ppl: 2, steps: 2, pool: 8, overrides: {max_length: 64}}]",),
     r"^curriculum.stages\[0\].overrides.max_length: sft has"),
    # a GRPO budget that overflows the context fails the GRPO stage (a), not the SFT stage checked before it
    (("grpo.max_completion_length=2040", f"curriculum.stages=[{SFT_STAGE}, {{name: a, ppl: 2, steps: 2, pool: 8}}]"),
     r"^model.context_length: a has a prompt of \d+ tokens; with grpo.max_completion_length 2040"),
]


@pytest.mark.run
@pytest.mark.parametrize(("overrides", "message"), TOO_LONG, ids=["sft.max_length", "stage max_length", "grpo"])
def test_rows_over_their_kinds_budget_fail_before_anything_is_written(tmp_path, cache_dir, overrides, message):
    run_dir = tmp_path / "run"
    cfg = compose_cfg(cache_dir, "+curriculum=kk_r1", "experiment=smoke", *overrides)
    with pytest.raises(ConfigError, match=message):
        run_curriculum(read_settings(cfg), run_dir)
    assert not (run_dir / "run.json").exists() and not (run_dir / "config.yaml").exists()


def _changed_weights(base_dir, final_dir) -> set[str]:
    base = dict(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).named_parameters())
    final = AutoModelForCausalLM.from_pretrained(final_dir, dtype=torch.float32).named_parameters()
    return {name for name, weights in final if not torch.equal(weights, base[name])}


@pytest.mark.run
@pytest.mark.parametrize(("lora", "only_projections"), [
    # adapters on every linear projection, merged at publish: embeddings and norms keep the base's values
    ("model.lora={r: 4, alpha: 8, dropout: 0.0, learning_rate: 1.0e-2}", True),
    # the control: full-weight SFT at the same rate moves the embeddings and norms too
    ("sft.learning_rate=1.0e-2", False),
], ids=["lora", "full-weights"])
def test_sft_trains_lora_adapters_and_publishes_them_merged(tmp_path, cache_dir, lora, only_projections):
    run_dir = tmp_path / "run"
    cfg = compose_cfg(cache_dir, "+curriculum=kk_r1", "experiment=smoke", "eval.n=2",
                      f"curriculum.stages=[{SFT_STAGE}]", lora)
    run_curriculum(read_settings(cfg), run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    (sft,) = manifest["stages"]
    final = run_dir / sft["checkpoint"]
    assert sft["status"] == "done" and sft["steps_done"] == 2
    assert not (final / "adapter_config.json").exists(), "the final is a plain checkpoint, adapters merged"
    assert fingerprint(AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)) != sft["policy_fingerprint"]
    changed = _changed_weights(manifest["base_model"], final)
    projections = {name for name in changed if name.endswith("_proj.weight")}
    assert projections, "the linear projections moved"
    assert (changed == projections) == only_projections, sorted(changed - projections)
