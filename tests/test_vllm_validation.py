"""Validation through vLLM, checked on this CPU with vLLM stood in for at the unit-test edge.

`tests/fake_vllm.py` generates greedily with transformers in vLLM's shapes. What is checked is what the
product does around vLLM: the same prompt tokens, grading and counting as the HF backend (equal rows),
one engine per validation released after (also on an error), the trainer's engine lent and put back to
sleep as TRL 1.16 expects, the validation plan, and each validation's cost in run.json. vLLM itself
(its kernels, sleep mode, a second engine in one process) needs a GPU: `make gpu-check` runs that.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from core.jsonl import JsonlWriter, read_jsonl
from core.models import load_for_inference, resolve_model
from curriculum.plan import build_plan, validation_subsets
from curriculum.prompts import render_prompt
from eval.cost import validation_cost
from eval.in_stage import InStageValidation
from eval.metrics import METRIC_COLUMNS
from eval.validation import validate
from eval.vllm_backend import ColocatedEngine
from tests import fake_vllm
from tests.pools import config_validation, held_out_pools
from train.tracking import NullTracker

TAG = {"stage": 1, "stage_name": "2ppl", "global_step": 2}
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def vllm_stand_in(monkeypatch):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return fake_vllm.install(monkeypatch)


@pytest.fixture
def smoke(make_cfg, cache_dir):
    """The smoke config (tiny model, 16-token completions) at HF batch size 1, so that HF and the stand-in
    run the very same unpadded forward passes; its checkpoint and two validation pools."""
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "eval.batch_size=1")
    return cfg, resolve_model(cfg.model, cache_dir), held_out_pools(cfg, 2, 3)


def _metrics(rows):
    return [{k: row[k] for k in ("ppl", *METRIC_COLUMNS)} for row in rows]


def _samples(out_dir, ppl):
    return [(s["completion"], s["tokens"], s["truncated"], s["correct"])
            for s in read_jsonl(out_dir / f"{ppl}.jsonl")]


def test_the_vllm_backend_validates_as_the_hf_backend(vllm_stand_in, smoke, tmp_path):
    cfg, model, pools = smoke
    hf = validate(config_validation(cfg), model, pools, tag=TAG, out_dir=tmp_path / "hf")
    cfg.eval.backend = "vllm"
    ours = validate(config_validation(cfg), model, pools, tag=TAG, out_dir=tmp_path / "vllm")
    assert _metrics(ours) == _metrics(hf)
    for ppl in pools:
        assert _samples(tmp_path / "vllm", ppl) == _samples(tmp_path / "hf", ppl)
    # one engine for both subsets, started as TRL starts its own, put to sleep (memory back) at the end
    (engine,) = vllm_stand_in.LLM.started
    assert engine.calls == [("generate", 4), ("generate", 4), ("sleep", 2)]
    assert engine.settings["enable_sleep_mode"]
    assert engine.settings["distributed_executor_backend"] == "external_launcher"
    assert engine.settings["gpu_memory_utilization"] == cfg.eval.vllm_gpu_memory_utilization
    assert not set(LAUNCH_VARIABLES) & set(os.environ), "the launcher variables set for the engine are gone"
    # the cost of each subset; the engine's start counted once
    assert [r["cost"]["backend"] for r in ours] == ["vllm", "vllm"] and [r["cost"]["backend"] for r in hf] == ["hf"] * 2
    assert ours[0]["cost"]["setup_seconds"] > 0 and ours[1]["cost"]["setup_seconds"] == 0
    tokens = sum(t for ppl in pools for _, t, _, _ in _samples(tmp_path / "vllm", ppl))
    assert validation_cost(ours)["tokens"] == tokens and validation_cost(ours)["completions"] == 8


def test_the_engine_is_released_when_a_validation_fails(vllm_stand_in, smoke, tmp_path, monkeypatch):
    cfg, model, pools = smoke
    cfg.eval.backend = "vllm"
    real = vllm_stand_in.LLM.generate

    def fail_second(self, prompts, params, use_tqdm=True):
        if len(self.calls) == 1:
            raise RuntimeError("CUDA out of memory (pretended)")
        return real(self, prompts, params, use_tqdm)

    monkeypatch.setattr(vllm_stand_in.LLM, "generate", fail_second)
    with pytest.raises(RuntimeError, match="pretended"):
        validate(config_validation(cfg), model, pools, tag=TAG, out_dir=tmp_path)
    (engine,) = vllm_stand_in.LLM.started
    assert engine.calls[-1] == ("sleep", 2)
    assert not set(LAUNCH_VARIABLES) & set(os.environ)


class FakeGeneration:
    """TRL 1.16's VLLMGeneration as far as lending its engine goes: sync_weights wakes the weights."""

    def __init__(self, llm, sleep_mode: bool):
        self.llm, self.enable_sleep_mode = llm, sleep_mode
        self._llm_weights_sleeping = sleep_mode

    def sync_weights(self):
        self.llm.calls.append(("sync_weights",))
        self._llm_weights_sleeping = False


def _trainer(llm, sleep_mode=True, step=3):
    return SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_generation=FakeGeneration(llm, sleep_mode),
                           state=SimpleNamespace(global_step=step), _last_loaded_step=-1)


@pytest.mark.parametrize("sleep_mode", [True, False])
def test_the_trainers_engine_is_lent_with_the_live_weights_and_put_back(vllm_stand_in, smoke, sleep_mode):
    cfg, model, pools = smoke
    llm = vllm_stand_in.LLM(model)
    trainer = _trainer(llm, sleep_mode)
    engine = ColocatedEngine.of(trainer)
    _, tokenizer = load_for_inference(model, "cpu")
    prompts = [render_prompt(r.question, cfg.prompt, chat=True) for r in pools["2ppl"]]
    with engine.lend(tokenizer) as lent:
        completions, cost = lent.generate(prompts, max_new_tokens=8)
    assert len(completions) == 4 and cost.backend == "vllm-colocated" and cost.completions == 4
    awake = [("wake_up", ("kv_cache",))] if sleep_mode else []
    asleep = [("sleep", 2)] if sleep_mode else []
    # TRL's order around a rollout: push the weights, wake the KV cache, generate, sleep (level 2 drops weights)
    assert llm.calls == [("sync_weights",), *awake, ("generate", 4), *asleep]
    assert trainer._last_loaded_step == 3, "the engine holds this step's weights"
    assert trainer.vllm_generation._llm_weights_sleeping is sleep_mode, "asleep: the next rollout syncs again"


def test_only_a_colocated_vllm_trainer_lends_its_engine():
    assert ColocatedEngine.of(SimpleNamespace(use_vllm=False, vllm_mode="colocate")) is None
    assert ColocatedEngine.of(SimpleNamespace(use_vllm=True, vllm_mode="server")) is None
    assert ColocatedEngine.of(SimpleNamespace(use_vllm=True, vllm_mode="colocate")) is not None


def test_in_stage_validation_generates_through_the_lent_engine(vllm_stand_in, smoke, tmp_path):
    """The same rows as HF generation on the live model, but generated by the trainer's engine."""
    cfg, model_path, pools = smoke
    model, tokenizer = load_for_inference(model_path, "cpu")

    def in_stage(name, colocated):
        writer = JsonlWriter(tmp_path / f"{name}.jsonl", key=("stage_step",))
        settings = config_validation(cfg)
        check = InStageValidation(settings, {"2ppl": pools["2ppl"]}, writer, NullTracker(), stage_index=1,
                                  stage_name="2ppl", step_offset=0)
        check.colocated = colocated
        return check.validate(model, tokenizer, step=1)

    (hf,) = in_stage("hf", None)
    llm = vllm_stand_in.LLM(model_path)
    (lent,) = in_stage("lent", ColocatedEngine(_trainer(llm, step=1)))
    assert _metrics([lent]) == _metrics([hf])
    assert (hf["cost"]["backend"], lent["cost"]["backend"]) == ("hf", "vllm-colocated")
    assert ("generate", 4) in llm.calls and model.training, "the policy is back in training mode"


def test_the_validation_plan_and_its_cost_reach_run_json(smoke_ladder, cache_dir):
    """The smoke ladder (5 stages, subsets 2 and 3) under the default plan, near: the baseline and the last
    stage on every subset, the others on their own ppl and the next stage's (all when neither is validated)."""
    run_dir, _ = smoke_ladder
    from tests.conftest import compose_cfg

    cfg = compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke")
    plan = build_plan(cfg)
    rows = read_jsonl(run_dir / "validation.jsonl")
    validated = {k: sorted(r["ppl"] for r in rows if r["stage"] == k) for k in range(len(plan) + 1)}
    planned = {k: validation_subsets("near", ["2ppl", "3ppl"], plan, k) for k in range(len(plan) + 1)}
    assert validated == {k: [int(level.removesuffix("ppl")) for level in levels] for k, levels in planned.items()}
    assert validated == {0: [2, 3], 1: [2, 3], 2: [3], 3: [2, 3], 4: [2, 3], 5: [2, 3]}
    manifest = json.loads((run_dir / "run.json").read_text())
    costs = [manifest["baseline_validation_cost"], *(s["validation_cost"] for s in manifest["stages"])]
    assert [c["subsets"] for c in costs] == [[f"{p}ppl" for p in validated[k]] for k in range(len(plan) + 1)]
    assert all(c["backend"] == "hf" and c["seconds"] > 0 and c["completions"] == 4 * len(c["subsets"])
               for c in costs)
