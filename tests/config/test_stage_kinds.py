"""Stage kinds: one list (core/stage_kinds.py) the schema and the trainers derive from, each kind's token budget,
and SFT with LoRA adapters."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from conf.choices import StageKindName
from conf.schema import StageConfig
from core.checks import ConfigError
from core.stage_kinds import DEFAULT_KIND, GRPO, SFT, STAGE_KIND_FACTS
from core.weights import fingerprint
from tests.conftest import compose_cfg
from train.run.runner import run_curriculum
from train.settings import read_settings
from train.stages.grpo import GrpoStage
from train.stages.kinds import STAGE_KINDS, kinds_by_name
from train.stages.sft import SftStage

SFT_STAGE = "{name: sft, kind: sft, ppl: 2, steps: 2, pool: 8}"


def test_the_schema_and_the_trainers_name_the_listed_kinds():
    # the names `kind:` accepts, and the default of a stage without one, are core/stage_kinds.py's
    assert [kind.value for kind in StageKindName] == list(STAGE_KIND_FACTS)
    assert StageConfig.kind.value == DEFAULT_KIND.name
    # the facts the layers below train/ read (the plan, the report) are the trainers' own
    assert {name: kind.facts for name, kind in STAGE_KINDS.items()} == STAGE_KIND_FACTS


class PpoStage:
    """A kind's trainer, as a new kind would add one."""

    facts = dataclasses.replace(GRPO, name="ppo", label="PPO", default=False)


@pytest.mark.parametrize(("implementations", "listed", "refused"), [
    # listed and implemented, each with the other's facts: the kinds by name
    ((GrpoStage, SftStage), STAGE_KIND_FACTS, None),
    # a kind added to core/stage_kinds.py alone: no trainer would build it
    ((GrpoStage, SftStage), {**STAGE_KIND_FACTS, "ppo": PpoStage.facts},
     "ppo is listed in core/stage_kinds.py with no trainer"),
    # a trainer added alone: the schema would refuse its name, the plan and the report not know its facts
    ((GrpoStage, SftStage, PpoStage), STAGE_KIND_FACTS,
     r"ppo's trainer \(PpoStage\) has facts core/stage_kinds.py does not list"),
    # a trainer whose facts were changed apart from the list: the plan would cap its steps by the list's
    ((GrpoStage, SftStage), {**STAGE_KIND_FACTS, "sft": dataclasses.replace(SFT, step_cap="max_steps")},
     r"sft's trainer \(SftStage\) has facts"),
], ids=["in-step", "listed-only", "trainer-only", "facts-differ"])
def test_a_kind_in_one_place_alone_is_refused_by_name(implementations, listed, refused):
    if refused is None:
        assert kinds_by_name(implementations, listed) == dict(zip(listed, implementations, strict=True))
    else:
        with pytest.raises(TypeError, match=refused):
            kinds_by_name(implementations, listed)


@pytest.mark.parametrize(("stages", "kinds"), [
    # a GRPO ladder builds the GRPO kind alone
    (None, ["grpo"]),
    # an SFT stage before a GRPO one: both kinds, in the plan's order
    (f"curriculum.stages=[{SFT_STAGE}, {{name: a, ppl: 2, steps: 2, pool: 8}}]", ["sft", "grpo"]),
], ids=["grpo", "sft-then-grpo"])
def test_a_run_builds_its_plans_kinds_and_rewards_once(cache_dir, stages, kinds):
    cfg = compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke", *([stages] if stages else []))
    settings = read_settings(cfg)
    assert list(settings.kinds) == kinds
    # the rewards the GRPO stages train on are those checking built: the stack run.json records
    funcs, weights = settings.kinds["grpo"].shared.rewards
    assert [(func.__name__, weight) for func, weight in zip(funcs, weights, strict=True)] == [
        (component["name"], component["weight"]) for component in settings.reward_stack]


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
