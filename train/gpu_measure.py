"""What `make gpu-check` measures (`train/gpu_check.py` is its entry): the machine, our runner's path and
bare TRL's on the same stage, peak memory, speed, validation costs, and the report that holds them.

The parts run on any device: a CPU test runs both paths on the tiny model (`experiment=smoke`).
"""

from __future__ import annotations

import importlib.metadata
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from transformers import AutoTokenizer
from trl import GRPOTrainer

from conf import CONF_DIR
from core.jsonl import read_jsonl
from core.models import resolve_model
from core.rundir import METRICS, RUN_JSON, VALIDATION_STEPS
from curriculum.data import draw_pools, to_rows
from curriculum.plan import Stage, build_plan, validation_completions
from eval.cost import validation_cost
from eval.settings import run_task, subset_levels
from train.gpu_check import GpuCheckError
from train.grpo_stage import grpo_config
from train.rewards import task_reward_funcs
from train.runner import run_curriculum
from train.settings import read_settings

GIB = 2**30
# What the check runs: kk_ladder's first stage (2ppl), 2 steps, subsets 2 and 3 (50 puzzles each),
# validated inside the stage after step 1. Later overrides (the command line's) win.
CHECK_OVERRIDES = ["+curriculum=kk_ladder", "limits.max_steps=2", "eval.subsets=[2,3]", "eval.n=50",
                   "eval.every=1", "logger=none"]
# The README's validation plan arithmetic: kk_ladder's 5 stages, 6 subsets of 100 puzzles.
PLAN_SUBSETS, PLAN_N = [f"{ppl}ppl" for ppl in range(2, 8)], 100


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=overrides)


def gpu_check_cfg(overrides: list[str], *, experiment: str = "single_gpu") -> DictConfig:
    """The check's config: CHECK_OVERRIDES, the experiment (single_gpu; a CPU test passes smoke), then
    `overrides`; cut to the curriculum's first stage."""
    cfg = _compose([*CHECK_OVERRIDES, f"experiment={experiment}", *overrides])
    cfg.curriculum.stages = cfg.curriculum.stages[:1]
    return cfg


def size_to_card(gpu: DictConfig, card_gb: float, overrides: list[str]) -> None:
    """`gpu.memory_gb` = this card (unless given), so vLLM's share is `gpu.vllm_gb` of it, as on a 24 GB card."""
    if not any(o.lstrip("+").startswith("gpu.memory_gb=") for o in overrides):
        gpu.memory_gb = round(card_gb, 1)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _adamw_8bit_step() -> str:
    """One bitsandbytes 8-bit AdamW step on the card: its CUDA kernels load and move a weight."""
    import bitsandbytes as bnb

    weight = torch.nn.Parameter(torch.ones(8192, device="cuda"))
    weight.grad = torch.full_like(weight, 0.5)
    bnb.optim.AdamW8bit([weight], lr=1e-3).step()
    moved = float((1.0 - weight.detach()).mean())
    if not 0 < moved < 1e-2:
        raise GpuCheckError(f"gpu-check: bitsandbytes' 8-bit AdamW moved a weight by {moved} (expected ~1e-3)")
    return f"bitsandbytes {_version('bitsandbytes')}: one 8-bit AdamW step moved the weights by {moved:.1e}"


def machine_checks() -> dict:
    """The card and what single_gpu needs on it; each check {ok, detail}."""
    props = torch.cuda.get_device_properties(0)
    checks = {"cuda": {"ok": True, "detail": f"{props.name}, torch {torch.__version__}, CUDA {torch.version.cuda}"},
              "bf16": {"ok": torch.cuda.is_bf16_supported(), "detail": "torch.cuda.is_bf16_supported()"}}
    vllm = _version("vllm")
    checks["vllm"] = {"ok": vllm is not None,
                      "detail": f"vllm {vllm}" if vllm else "not installed: pip install -e '.[vllm]'"}
    try:
        checks["bitsandbytes"] = {"ok": True, "detail": _adamw_8bit_step()}
    except Exception as err:  # not installed, or its CUDA kernels fail on this card
        checks["bitsandbytes"] = {"ok": False, "detail": f"{type(err).__name__}: {err}"}
    return {"device": props.name, "memory_gb": round(props.total_memory / GIB, 1),
            "capability": f"{props.major}.{props.minor}", "trl": _version("trl"), "checks": checks}


class MemoryWatch:
    """Peak GPU memory over a block: the device's used memory sampled every `every` seconds (all of this
    process: torch, vLLM, the CUDA context; other processes too), and torch's own peak counters (whether
    they include vLLM's sleep-mode allocator is not known: compare with the device's). No CUDA: wall time only."""

    def __init__(self, cuda: bool, every: float = 0.1):
        self.cuda, self.every, self.peak_used = cuda, every, 0
        self.result: dict = {}

    def __enter__(self):
        self.began, self.stop = time.perf_counter(), threading.Event()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self) -> None:
        while True:
            free, total = torch.cuda.mem_get_info()
            self.peak_used = max(self.peak_used, total - free)
            if self.stop.wait(self.every):
                return

    def __exit__(self, *exc) -> None:
        self.result = {"seconds": round(time.perf_counter() - self.began, 1)}
        if self.cuda:
            self.stop.set()
            self.thread.join()
            self.result.update(device_peak_used_gb=round(self.peak_used / GIB, 2),
                               torch_max_allocated_gb=round(torch.cuda.max_memory_allocated() / GIB, 2),
                               torch_max_reserved_gb=round(torch.cuda.max_memory_reserved() / GIB, 2))


def step_summary(rows: list[dict], completions_per_step: int) -> dict:
    """Step time, completion length and tokens per second from TRL's step log lines. Memory and time grow
    with the completions' length, so the mean length says what the check's peaks were measured at.

    >>> step_summary([{"step_time": 10.0, "completions/mean_length": 500.0},
    ...               {"step_time": 30.0, "completions/mean_length": 1500.0}], 64)["generated_tokens_per_second"]
    3200.0
    """
    seconds = [float(r["step_time"]) for r in rows]
    lengths = [float(r["completions/mean_length"]) for r in rows]
    return {"steps": len(rows), "step_seconds": [round(x, 2) for x in seconds],
            "mean_step_seconds": round(sum(seconds) / len(seconds), 2),
            "mean_completion_tokens": round(sum(lengths) / len(lengths), 1),
            "generated_tokens_per_second": round(sum(lengths) * completions_per_step / sum(seconds), 1)}


def sampling_mismatch(rows: list[dict]) -> dict:
    """vLLM-vs-trainer log-prob mismatch and importance ratios TRL logged (judges vllm_importance_sampling_mode)."""
    return {k: [r[k] for r in rows] for k in sorted({k for r in rows for k in r if k.startswith("sampling/")})}


def ours_summary(run_dir: Path) -> dict:
    """What the runner's path (baseline validation, the stage with one in-stage validation, stage-end
    validation) left in `run_dir`: the stage's time, TRL's step lines, each validation's cost."""
    manifest = json.loads((run_dir / RUN_JSON).read_text())
    stage = manifest["stages"][0]
    rows = read_jsonl(run_dir / METRICS)
    summary = next((r for r in rows if r.get("kind") == "summary"), {})
    steps = [r for r in rows if r.get("kind") == "step"]
    return {"run_dir": str(run_dir), "stage_wall_seconds": stage.get("wall_seconds"),
            "train_runtime": summary.get("train_runtime"), "steps": steps,
            "validation_cost": {"baseline": manifest.get("baseline_validation_cost"),
                                "in_stage": validation_cost(read_jsonl(run_dir / VALIDATION_STEPS)),
                                "after_stage": stage.get("validation_cost")}}


@dataclass(frozen=True)
class BareRun:
    """What bare TRL's run of the check's stage reads: the groups the runner would hand that stage."""

    stage: Stage
    grpo: DictConfig
    reward: DictConfig
    prompt: DictConfig
    model: DictConfig
    ev: DictConfig
    task: DictConfig
    cache_dir: Path
    seed: int


def run_bare_trl(run: BareRun, out_dir: Path) -> dict:
    """The same stage's steps with GRPOTrainer alone: its GRPOConfig, reward functions and rows, nothing else."""
    stage, fmt = run.stage, str(run.prompt.fmt)
    task = run_task(run.task, fmt)
    base = resolve_model(run.model, run.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(base, padding_side="left")
    subsets = subset_levels(task, run.ev.subsets)
    pools = draw_pools(task, [stage], subsets, n=int(run.ev.n), eval_seed=int(run.ev.seed), seed=run.seed)
    rows = to_rows(pools.training[stage.name], run.prompt, tokenizer, chat=bool(run.model.chat),
                   chat_kwargs=run.model.get("chat_template_kwargs"))
    args = grpo_config(OmegaConf.to_container(run.grpo, resolve=True), stage, out_dir, seed=run.seed,
                       lora=run.model.get("lora"))
    args.save_strategy = "no"  # checkpoints for resume are the runner's (single_gpu saves every 10 steps: not in 2)
    funcs, args.reward_weights = task_reward_funcs(run.reward, task, fmt=fmt,
                                                   max_completion_length=args.max_completion_length)
    began = time.perf_counter()
    trainer = GRPOTrainer(model=base, reward_funcs=funcs, args=args, train_dataset=rows, processing_class=tokenizer)
    built = time.perf_counter() - began
    output = trainer.train()
    steps = [r for r in trainer.state.log_history if "step_time" in r]
    return {"construct_seconds": round(built, 2), "train_runtime": output.metrics["train_runtime"],
            "wall_seconds": round(time.perf_counter() - began, 2), "steps": steps}


def ladder_plan() -> list:
    """kk_ladder's plan as it is configured (the projection's stages)."""
    return build_plan(_compose(["+curriculum=kk_ladder"]))


def validation_projection(after_stage: dict | None, plan) -> dict | None:
    """kk_ladder's whole validation plan (6 subsets x 100, baseline and 5 stages), projected from one measured
    validation: its seconds per completion and its engine start. 2-3ppl completions are the shortest, so
    this is a lower bound for the 4-7ppl subsets."""
    if not after_stage or not after_stage.get("completions"):
        return None
    per_completion = (after_stage["seconds"] - after_stage["setup_seconds"]) / after_stage["completions"]
    out = {"seconds_per_completion": round(per_completion, 4), "setup_seconds": after_stage["setup_seconds"]}
    for mode in ("all", "near"):
        completions = validation_completions(mode, PLAN_SUBSETS, plan, PLAN_N)
        seconds = completions * per_completion + (len(plan) + 1) * after_stage["setup_seconds"]
        out[mode] = {"completions": completions, "minutes": round(seconds / 60, 1)}
    return out


def assemble_report(machine: dict | None, run: BareRun, ours: dict, ours_memory: dict, bare: dict,
                    bare_memory: dict) -> dict:
    """gpu_check.json: the machine, what ran (`run`: both paths ran its stage), memory, speed, the overhead
    ratio, validation costs and plan."""
    grpo, model, ev = run.grpo, run.model, run.ev
    per_step = int(grpo.per_device_train_batch_size) * int(grpo.gradient_accumulation_steps)
    card_gb = (machine or {}).get("memory_gb")
    share = grpo.get("vllm_gpu_memory_utilization")
    return {
        "machine": machine,
        "ran": {"model": model.id if model.source == "hub" else model.source,
                "steps": run.stage.steps,
                "completions_per_step": per_step, "max_completion_length": int(grpo.max_completion_length),
                "validation": {"subsets": list(ev.subsets), "n": int(ev.n), "backend": ev.backend}},
        "memory": {"ours": ours_memory, "bare_trl": bare_memory,
                   "vllm_budget_gb": round(share * card_gb, 2) if share and card_gb else None},
        "speed": {"ours": step_summary(ours["steps"], per_step), "bare_trl": step_summary(bare["steps"], per_step)},
        "overhead": {"train_runtime_ratio": round(ours["train_runtime"] / bare["train_runtime"], 3),
                     "ours_stage_wall_seconds": ours["stage_wall_seconds"],
                     "bare_trl_wall_seconds": bare["wall_seconds"]},
        "validation_cost": ours["validation_cost"],
        "validation_plan_projection": validation_projection(ours["validation_cost"]["after_stage"], ladder_plan()),
        "sampling_mismatch": sampling_mismatch(ours["steps"]),
        "run_dir": ours["run_dir"],
    }


def run_check(cfg: DictConfig, argv: list[str], out: Path) -> dict:
    """Every phase on this card (it has CUDA); gpu_check.json's content."""
    machine = machine_checks()
    missing = [name for name, check in machine["checks"].items() if not check["ok"]]
    if missing:
        details = "; ".join(f"{name}: {machine['checks'][name]['detail']}" for name in missing)
        raise GpuCheckError(f"gpu-check: {details}")
    size_to_card(cfg.gpu, machine["memory_gb"], argv)
    run_dir = out.parent / "gpu_check" / time.strftime("%Y-%m-%d_%H-%M-%S")
    with MemoryWatch(cuda=True) as ours_memory:
        settings = read_settings(cfg)
        run_curriculum(settings, run_dir)
    bare_run = BareRun(stage=settings.plan[0], grpo=cfg.grpo, reward=cfg.reward, prompt=cfg.prompt,
                       model=cfg.model, ev=cfg.eval, task=cfg.task, cache_dir=Path(cfg.paths.cache_dir),
                       seed=int(cfg.seed))
    with MemoryWatch(cuda=True) as bare_memory:
        bare = run_bare_trl(bare_run, run_dir / "bare-trl")
    return assemble_report(machine, bare_run, ours_summary(run_dir), ours_memory.result, bare, bare_memory.result)

