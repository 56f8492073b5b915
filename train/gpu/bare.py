"""The GPU check's yardstick: the check's stages with TRL's GRPOTrainer alone, each stage in a process of its own.

`python -m train.gpu.bare STAGE OUT_DIR [--device cpu] [overrides]`: stage STAGE (1, 2, ...) of the check's
plan (`train.gpu.config.gpu_check_cfg`, the same overrides as our run), with the GRPOConfig, reward functions,
rows and seed the runner would give it, from the previous stage's saved final (`OUT_DIR/<k-1>-<name>/final`,
stage 1 from the base model) to its own. Nothing of ours runs around it: no validation, no run directory.
It writes `OUT_DIR/<k>-<name>.json`: construction and training seconds, TRL's step lines, memory.

A process per stage, as a TRL user's script per stage would run: in one process TRL 1.16's colocated engine
leaves RANK and WORLD_SIZE set, and the next trainer would run distributed (what `train/stages/grpo.py`'s
`colocated_engine_setup` undoes for our runner). On a CPU, vLLM's CPU build needs its weights kept
reloadable for TRL's per-step sync (eval/vllm_engine.py `reloadable_weights`, nothing on CUDA), bare or not.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curriculum.plan import Stage


@dataclass(frozen=True)
class BareRun:
    """What bare TRL's run of one of the check's stages reads: the groups the runner would hand that stage."""

    plan: list[Stage]
    grpo: DictConfig
    reward: DictConfig
    prompt: DictConfig
    model: DictConfig
    ev: DictConfig
    task: DictConfig
    cache_dir: Path
    seed: int

    @classmethod
    def of(cls, cfg: DictConfig, plan: list[Stage]) -> BareRun:
        return cls(plan=plan, grpo=cfg.grpo, reward=cfg.reward, prompt=cfg.prompt, model=cfg.model, ev=cfg.eval,
                   task=cfg.task, cache_dir=Path(cfg.paths.cache_dir), seed=int(cfg.seed))


def stage_final(out_dir: Path, stage: Stage) -> Path:
    return out_dir / stage.dirname / "final"


def run_bare_stage(run: BareRun, stage: Stage, out_dir: Path) -> dict:
    """One stage with GRPOTrainer alone: its GRPOConfig, reward functions and rows, from the previous stage's
    final (stage 1: the base model); the final saved for the next."""
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from core.models import resolve_model
    from curriculum.data import draw_pools, to_rows
    from curriculum.tasks import build_task
    from eval.settings import subset_levels
    from eval.vllm_engine import ProcessEngine, engine_arguments, rollout_arguments
    from train.rewards.reward_group import task_reward_funcs
    from train.stages.grpo import colocated, colocated_engine_setup, grpo_config

    fmt = str(run.prompt.fmt)
    task = build_task(run.task, fmt=fmt)
    init = str(stage_final(out_dir, run.plan[stage.index - 2])) if stage.index > 1 else \
        resolve_model(run.model, run.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(init, padding_side="left")
    pools = draw_pools(task, run.plan, subset_levels(task, run.ev.subsets), n=int(run.ev.n),
                       eval_seed=int(run.ev.seed), seed=run.seed)
    rows = to_rows(task, pools.training[stage.name], run.prompt, tokenizer, chat=bool(run.model.chat),
                   chat_kwargs=run.model.get("chat_template_kwargs"))
    args = grpo_config(OmegaConf.to_container(run.grpo, resolve=True), stage, out_dir / stage.dirname / "trainer",
                       seed=run.seed, lora=run.model.get("lora"))
    args.save_strategy = "no"  # checkpoints for resume are the runner's (single_gpu saves every 10 steps: not in 2)
    funcs, args.reward_weights = task_reward_funcs(run.reward, task, fmt=fmt,
                                                   max_completion_length=args.max_completion_length)
    began = time.perf_counter()
    # the engine TRL would start, with the arguments ours starts its one engine with (the same rollouts)
    engine = None
    if colocated(args):
        engine = ProcessEngine(engine_arguments(rollout_arguments(vars(args)), rollouts=True), rollouts=True)
    with colocated_engine_setup(engine) if engine is not None else nullcontext():
        trainer = GRPOTrainer(model=init, reward_funcs=funcs, args=args, train_dataset=rows,
                              processing_class=tokenizer)
    built = time.perf_counter() - began
    output = trainer.train()
    trainer.save_model(str(stage_final(out_dir, stage)))
    steps = [r for r in trainer.state.log_history if "step_time" in r]
    return {"stage": stage.name, "construct_seconds": round(built, 2), "train_runtime": output.metrics["train_runtime"],
            "wall_seconds": round(time.perf_counter() - began, 2), "steps": steps}


def bare_stage_command(stage: Stage, out_dir: Path, device: str, overrides: list[str]) -> list[str]:
    """The command line of bare TRL's process for `stage`."""
    return [sys.executable, "-m", "train.gpu.bare", str(stage.index), str(out_dir), "--device", device, *overrides]


def main(argv: list[str] | None = None) -> None:
    """Run one bare stage (see the module docstring); its report in OUT_DIR/<k>-<name>.json."""
    from core.models import defer_bitsandbytes, quiet_libraries
    from curriculum.plan import build_plan
    from train.gpu.config import gpu_check_cfg
    from train.gpu.device import MemoryWatch, split_device

    index, out_dir, *rest = sys.argv[1:] if argv is None else argv
    device, overrides = split_device(rest)
    cfg = gpu_check_cfg(overrides, device=device)
    defer_bitsandbytes({str(cfg.grpo.get("optim"))})
    quiet_libraries()
    plan = build_plan(cfg)
    stage = plan[int(index) - 1]
    with MemoryWatch(cuda=device == "cuda") as memory:
        report = run_bare_stage(BareRun.of(cfg, plan), stage, Path(out_dir))
    (Path(out_dir) / f"{stage.dirname}.json").write_text(json.dumps({**report, "memory": memory.result}, indent=2))


if __name__ == "__main__":
    main()
