"""`make gpu-check` on this CPU: its refusals, its config, and the whole check run as a user runs it with
`--device cpu` (vLLM's CPU build): our runner and bare TRL (a process per stage) on the same two stages, vLLM
rollouts and validation, and the report built from them. What needs the card (bf16, bitsandbytes' kernels,
sleep mode, memory peaks) runs on a GPU only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.rundir.files import read_jsonl
from curriculum.plan import build_plan
from tests.conftest import run_cli
from tests.engine_guard import engine_starts
from train.gpu.bare import gpu_check_cfg, size_to_card
from train.gpu.measure import validation_projection

# vLLM for real: `make test` runs these again under the transformers a GPU user's `vllm` extra gets (Makefile)
pytestmark = pytest.mark.vllm


def test_without_cuda_it_stops_at_once_with_one_named_line(tmp_path):
    done = run_cli("train.gpu_check", "model=tiny", f"paths.output_dir={tmp_path}")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], "one line"
    assert done.stderr.startswith("gpu-check: no CUDA device")
    assert not (tmp_path / "gpu_check.json").exists(), "nothing composed or written before the CUDA check"
    assert run_cli("train.gpu_check", "--cuda-only").returncode == 2
    wrong = run_cli("train.gpu_check", "--device", "tpu")
    assert (wrong.returncode, wrong.stderr.strip()) == (2, "gpu-check: --device tpu: not one of cuda, cpu")


def test_the_check_is_kk_ladders_first_two_stages_under_single_gpu_sized_to_the_card():
    cfg = gpu_check_cfg([])
    assert [(stage.name, stage.steps) for stage in build_plan(cfg)] == [("2ppl", 2), ("3ppl", 2)]
    assert (list(cfg.eval.subsets), cfg.eval.n, cfg.eval.every, cfg.eval.backend) == ([2, 3], 50, 1, "vllm")
    assert cfg.grpo.use_vllm and cfg.grpo.vllm_importance_sampling_mode == "token_truncate"
    size_to_card(cfg.gpu, 141.0, [])  # an H200: vLLM still gets gpu.vllm_gb (7 GB) of it
    assert cfg.grpo.vllm_gpu_memory_utilization == round(7 / 141, 3) == cfg.eval.vllm_gpu_memory_utilization
    given = gpu_check_cfg(["gpu.memory_gb=48"])
    size_to_card(given.gpu, 141.0, ["gpu.memory_gb=48"])
    assert given.gpu.memory_gb == 48, "a size given on the command line stays"
    on_cpu = gpu_check_cfg([], device="cpu")
    assert (on_cpu.device, on_cpu.model.name, on_cpu.grpo.use_vllm, on_cpu.grpo.vllm_mode) == (
        "auto", "tiny_vllm", True, "colocate")
    assert not on_cpu.grpo.get("vllm_enable_sleep_mode"), "CUDA's, refused on a CPU"


@pytest.fixture(scope="module")
def cpu_check(cache_dir, tmp_path_factory):
    """`python -m train.gpu_check --device cpu` as a user runs it, on 4 puzzles a subset; its report."""
    out = tmp_path_factory.mktemp("gpu-check")
    starts = out / "engine-starts.jsonl"  # tests/engine_guard.py: every vLLM engine each process starts
    done = run_cli("train.gpu_check", "--device", "cpu", f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}",
                   "eval.n=4", timeout=1200, env={"KK_ENGINE_LOG": str(starts)})
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads((out / "gpu_check.json").read_text()), "engine_starts": engine_starts(starts)}


def test_each_process_starts_one_vllm_engine_as_cuda_allows(cpu_check):
    """Ours (two stages, five validations: one process) and bare TRL's two processes: one engine start each,
    under the guard that refuses a second as CUDA's allocator would."""
    assert sorted(cpu_check["engine_starts"].values()) == [1, 1, 1]


def test_both_paths_run_both_stages_through_vllm_in_one_undistributed_process(cpu_check):
    assert [s["name"] for s in cpu_check["ran"]["stages"]] == ["2ppl", "3ppl"]
    assert [d["type"] for d in cpu_check["distributed"]] == ["NO", "NO"], "stage 2 too: one process, no DDP"
    assert cpu_check["machine"]["checks"]["vllm"]["ok"]
    for path in ("ours", "bare_trl"):
        speed = cpu_check["speed"][path]
        assert speed["steps"] == 4 and speed["mean_step_seconds"] > 0 and speed["generated_tokens_per_second"] > 0
    assert len(cpu_check["memory"]["bare_trl"]) == 2 and cpu_check["memory"]["ours"]["seconds"] > 0
    # vLLM's and the trainer's log-probs of each rollout, as TRL logs them for vLLM rollouts only
    assert len(cpu_check["sampling_mismatch"]["sampling/sampling_logp_difference/mean"]) == 4


def test_bare_trl_runs_the_same_steps_as_our_runner(cpu_check):
    """Same GRPOConfig, rewards, rows and seed, and each bare stage from bare's previous final: the two paths
    generate and score the same completions, stage 2 included."""
    run_dir = Path(cpu_check["run_dir"])
    ours = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") == "step"]
    bare = [step for name in ("1-2ppl", "2-3ppl")
            for step in json.loads((run_dir / "bare-trl" / f"{name}.json").read_text())["steps"]]
    assert len(ours) == len(bare) == 4
    for key in ("reward", "completions/mean_length", "rewards/low_tokens/mean", "num_tokens"):
        assert [r[key] for r in ours] == [r[key] for r in bare], key


def test_the_overhead_compares_training_with_training(cpu_check):
    """Ours less its in-stage validation against bare TRL's train_runtime, over both stages and per stage."""
    o = cpu_check["overhead"]
    assert len(o["per_stage"]) == len(o["ours_training_seconds"]) == len(o["bare_trl_train_runtime"]) == 2
    ratio = sum(o["ours_training_seconds"]) / sum(o["bare_trl_train_runtime"])  # of seconds rounded to 0.01
    assert o["train_runtime_ratio"] == pytest.approx(ratio, abs=0.01)
    inside = [s["in_stage"] for s in cpu_check["validation_cost"]["stages"]]
    assert all(cost["seconds"] > 0 for cost in inside), "taken out of ours: it was there to take out"


def test_every_validation_and_its_cost_is_in_the_report(cpu_check):
    costs = cpu_check["validation_cost"]
    assert (costs["baseline"]["subsets"], costs["baseline"]["completions"], costs["baseline"]["backend"]) == (
        ["2ppl", "3ppl"], 8, "vllm")
    # inside each stage (after step 1): the stage's own subset through the trainer's engine; after it, both
    assert [(s["in_stage"]["subsets"], s["in_stage"]["backend"]) for s in costs["stages"]] == [
        (["2ppl"], "vllm-colocated"), (["3ppl"], "vllm-colocated")]
    assert [(s["after_stage"]["completions"], s["after_stage"]["backend"]) for s in costs["stages"]] == [
        (8, "vllm"), (8, "vllm")]
    projection = cpu_check["validation_plan_projection"]
    assert (projection["all"]["completions"], projection["near"]["completions"]) == (3600, 2000)


def test_the_projection_scales_one_validation_to_the_whole_plan():
    ladder = build_plan(gpu_check_cfg([], device="cpu"))  # two stages: 3 validations (baseline, each end)
    measured = {"seconds": 30.0, "setup_seconds": 10.0, "completions": 200}
    projection = validation_projection(measured, ladder)
    # 0.1 s a completion; 2 stages, all: 3 validations (baseline, after each) of 6 x 100, plus 3 engine starts
    assert projection["seconds_per_completion"] == 0.1
    assert projection["all"] == {"completions": 1800, "minutes": round((180 + 30) / 60, 1)}
    assert validation_projection(None, ladder) is None
