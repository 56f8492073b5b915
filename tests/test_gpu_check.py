"""`make gpu-check` on this CPU: its refusal without CUDA, its config, and both of its paths (our runner and
bare TRL on the same stage) run on the tiny model under experiment=smoke, with the report built from them.

What needs the card (vLLM engines, bf16, bitsandbytes' kernels, memory peaks) never runs here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curriculum.plan import build_plan
from tests.conftest import run_cli
from train.gpu_measure import (
    BareRun,
    MemoryWatch,
    assemble_report,
    gpu_check_cfg,
    ours_summary,
    run_bare_trl,
    size_to_card,
    validation_projection,
)
from train.runner import run_curriculum
from train.settings import read_settings


def test_without_cuda_it_stops_at_once_with_one_named_line(tmp_path):
    done = run_cli("train.gpu_check", "model=tiny", f"paths.output_dir={tmp_path}")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], "one line"
    assert done.stderr.startswith("gpu-check: no CUDA device")
    assert not (tmp_path / "gpu_check.json").exists(), "nothing composed or written before the CUDA check"
    assert run_cli("train.gpu_check", "--cuda-only").returncode == 2


def test_the_check_is_kk_ladders_first_stage_under_single_gpu_sized_to_the_card():
    cfg = gpu_check_cfg([])
    (stage,) = build_plan(cfg)
    assert (stage.name, stage.steps) == ("2ppl", 2)
    assert (list(cfg.eval.subsets), cfg.eval.n, cfg.eval.every, cfg.eval.backend) == ([2, 3], 50, 1, "vllm")
    assert cfg.grpo.use_vllm and cfg.grpo.vllm_importance_sampling_mode == "token_truncate"
    size_to_card(cfg.gpu, 141.0, [])  # an H200: vLLM still gets gpu.vllm_gb (7 GB) of it
    assert cfg.grpo.vllm_gpu_memory_utilization == round(7 / 141, 3) == cfg.eval.vllm_gpu_memory_utilization
    given = gpu_check_cfg(["gpu.memory_gb=48"])
    size_to_card(given.gpu, 141.0, ["gpu.memory_gb=48"])
    assert given.gpu.memory_gb == 48, "a size given on the command line stays"


@pytest.fixture(scope="module")
def both_paths(cache_dir, tmp_path_factory):
    """Our runner and bare TRL on the same stage, tiny model, CPU (experiment=smoke instead of single_gpu)."""
    out = tmp_path_factory.mktemp("gpu-check")
    cfg = gpu_check_cfg([f"paths.cache_dir={cache_dir}", f"paths.output_dir={out}", "eval.n=4"],
                        experiment="smoke")
    with MemoryWatch(cuda=False) as ours_memory:
        run_curriculum(read_settings(cfg), out / "run")
    (stage,) = build_plan(cfg)
    run = BareRun(stage=stage, grpo=cfg.grpo, reward=cfg.reward, prompt=cfg.prompt, model=cfg.model, ev=cfg.eval,
                  task=cfg.task, cache_dir=Path(cfg.paths.cache_dir), seed=int(cfg.seed))
    with MemoryWatch(cuda=False) as bare_memory:
        bare = run_bare_trl(run, out / "bare-trl")
    return run, ours_summary(out / "run"), ours_memory.result, bare, bare_memory.result


def test_bare_trl_runs_the_same_steps_as_our_runner(both_paths):
    """Same GRPOConfig, rewards, rows and seed: the two paths generate and score the same completions."""
    _, ours, _, bare, _ = both_paths
    assert len(ours["steps"]) == len(bare["steps"]) == 2
    for key in ("reward", "completions/mean_length", "rewards/answer_reward/mean", "num_tokens"):
        assert [r[key] for r in ours["steps"]] == [r[key] for r in bare["steps"]], key


def test_the_report_holds_speed_overhead_and_every_validations_cost(both_paths):
    run, ours, ours_memory, bare, bare_memory = both_paths
    report = json.loads(json.dumps(assemble_report(None, run, ours, ours_memory, bare, bare_memory)))
    assert report["ran"]["completions_per_step"] == 4 and report["ran"]["validation"]["subsets"] == [2, 3]
    for path in ("ours", "bare_trl"):
        speed = report["speed"][path]
        assert speed["steps"] == 2 and speed["mean_step_seconds"] > 0 and speed["generated_tokens_per_second"] > 0
        assert report["memory"][path]["seconds"] > 0
    assert report["overhead"]["train_runtime_ratio"] > 0
    costs = report["validation_cost"]
    # baseline and after the stage: both subsets of 4 puzzles; inside it (after step 1): the stage's own, 2ppl
    assert [(costs[k]["subsets"], costs[k]["completions"]) for k in ("baseline", "in_stage", "after_stage")] == [
        (["2ppl", "3ppl"], 8), (["2ppl"], 4), (["2ppl", "3ppl"], 8)]
    projection = report["validation_plan_projection"]
    assert (projection["all"]["completions"], projection["near"]["completions"]) == (3600, 2000)


def test_the_projection_scales_one_validation_to_the_whole_plan():
    ladder = build_plan(gpu_check_cfg([], experiment="smoke"))  # one stage: 2 validations (baseline, end)
    measured = {"seconds": 30.0, "setup_seconds": 10.0, "completions": 200}
    projection = validation_projection(measured, ladder)
    # 0.1 s a completion; 1 stage: all = near = 2 validations of 6 x 100, plus 2 engine starts
    assert projection["seconds_per_completion"] == 0.1
    assert projection["all"] == projection["near"] == {"completions": 1200, "minutes": round((120 + 20) / 60, 1)}
    assert validation_projection(None, ladder) is None
