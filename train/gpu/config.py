"""What a GPU check runs: kk_ladder's first stages, cut short, under `experiment=single_gpu` (or its CPU twin), the
same for our runner and bare TRL."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from conf import CONF_DIR

# What the check runs: kk_ladder's first two stages (2ppl, 3ppl: the handoff, a second trainer and its second
# engine), 2 steps each, subsets 2 and 3 (50 puzzles each), validated inside each stage after step 1. Later
# overrides (the command line's) win.
CHECK_OVERRIDES = ["+curriculum=kk_ladder", "limits.max_steps=2", "eval.subsets=[2,3]", "eval.n=50",
                   "eval.every=1", "logger=none"]
CHECK_STAGES = 2
# The check on a CPU (`--device cpu`): single_gpu's path less what needs CUDA (bf16, 8-bit AdamW, sleep mode):
# the smoke config on the tiny model whose heads vLLM's CPU attention takes, vLLM rollouts in colocate mode
# and validation through vLLM.
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
    """The check's config: CHECK_OVERRIDES, the device's (single_gpu, or its CPU twin), then `overrides`; cut to
    the curriculum's first CHECK_STAGES stages."""
    cfg = compose_config([*CHECK_OVERRIDES, *DEVICE_OVERRIDES[device], *overrides])
    cfg.curriculum.stages = cfg.curriculum.stages[:CHECK_STAGES]
    return cfg


def size_to_card(gpu: DictConfig, card_gb: float, overrides: list[str]) -> None:
    """`gpu.memory_gb` = this card (unless given), so vLLM's share is `gpu.vllm_gb` of it, as on a 24 GB card."""
    if not any(o.lstrip("+").startswith("gpu.memory_gb=") for o in overrides):
        gpu.memory_gb = round(card_gb, 1)
