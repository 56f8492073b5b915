"""What a GPU check runs (`gpu_check_cfg`: kk_ladder's first stages, cut short), and its yardstick: those stages
with TRL's GRPOTrainer alone. `python -m train.gpu.bare STAGE OUT_DIR [--device cpu] [overrides]` runs one stage as
the runner would configure it, nothing of ours around it, and writes `OUT_DIR/<k>-<name>.json`; a process per stage,
as a TRL user's script would (TRL's colocated engine leaves RANK and WORLD_SIZE set for the next trainer).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from conf import CONF_DIR
from curriculum.plan import Stage

# What the check runs: kk_ladder's first two stages (a handoff), 2 steps each, validated inside each after step 1
CHECK_OVERRIDES = ["+curriculum=kk_ladder", "limits.max_steps=2", "eval.subsets=[2,3]", "eval.n=50",
                   "eval.every=1", "logger=none"]
CHECK_STAGES = 2
# The check on a CPU: single_gpu's path less what needs CUDA, on the tiny model whose heads vLLM's CPU build takes
DEVICE_OVERRIDES = {
    "cuda": ["experiment=single_gpu"],
    "cpu": ["experiment=smoke", "model=tiny_vllm", "+grpo.use_vllm=true", "+grpo.vllm_mode=colocate",
            "eval.backend=vllm"],
}


def compose_config(overrides: list[str]) -> DictConfig:
    """The config `python -m train <overrides>` would run."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=overrides)


def gpu_check_cfg(overrides: list[str], *, device: str = "cuda") -> DictConfig:
    """The check's config: CHECK_OVERRIDES, the device's, then `overrides`; cut to the first CHECK_STAGES stages."""
    cfg = compose_config([*CHECK_OVERRIDES, *DEVICE_OVERRIDES[device], *overrides])
    cfg.curriculum.stages = cfg.curriculum.stages[:CHECK_STAGES]
    return cfg


def size_to_card(gpu: DictConfig, card_gb: float, overrides: list[str]) -> None:
    """`gpu.memory_gb` = this card (unless given), so vLLM's share is `gpu.vllm_gb` of it, as on a 24 GB card."""
    if not any(o.lstrip("+").startswith("gpu.memory_gb=") for o in overrides):
        gpu.memory_gb = round(card_gb, 1)


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
    """One stage with GRPOTrainer alone, from the previous stage's final (stage 1: the base model) to its own."""
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





def main(argv: list[str] | None = None) -> None:
    """Run one bare stage (see the module docstring); its report in OUT_DIR/<k>-<name>.json."""
    from core.models import defer_bitsandbytes, quiet_libraries
    from curriculum.plan import build_plan
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
