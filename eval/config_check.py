"""Checks of the `eval` and `data` config groups, shared by `python -m train` and `python -m eval`.

Each error names the key that holds the bad value, and comes before any model or data loads.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from curriculum.errors import ConfigError
from curriculum.plan import KNOWN_PPL, VALIDATION_PLANS
from eval.vllm_backend import vllm_available

DATA_SOURCES = ("generated", "hub", "local")


def check_eval_config(eval_cfg: DictConfig) -> None:
    """Raise ConfigError for the first bad `eval.*` value."""
    subsets = list(eval_cfg.subsets)
    if not subsets:
        raise ConfigError("eval.subsets: must list at least one ppl")
    for ppl in subsets:
        if ppl not in KNOWN_PPL:
            raise ConfigError(f"eval.subsets: unknown ppl {ppl}; puzzles exist for 2..8")
    if int(eval_cfg.every) < 0:
        raise ConfigError(f"eval.every: must be >= 0 steps (0 = only after each stage; got {eval_cfg.every})")
    for name in ("n", "samples", "batch_size", "max_new_tokens"):
        if int(eval_cfg[name]) <= 0:
            raise ConfigError(f"eval.{name}: must be > 0 (got {eval_cfg[name]})")
    if eval_cfg.backend not in ("hf", "vllm"):
        raise ConfigError(f"eval.backend: {eval_cfg.backend!r} is not hf or vllm")
    if eval_cfg.backend == "vllm" and not vllm_available():
        raise ConfigError("eval.backend: vllm needs CUDA and the vllm extra (pip install -e '.[vllm]'); "
                          "use eval.backend=hf")
    if eval_cfg.subsets_after_stage not in VALIDATION_PLANS:
        raise ConfigError(f"eval.subsets_after_stage: {eval_cfg.subsets_after_stage!r} is not one of "
                          f"{VALIDATION_PLANS}")
    share = eval_cfg.vllm_gpu_memory_utilization
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ConfigError(f"eval.vllm_gpu_memory_utilization: must be a share of the card in (0, 1] (got {share!r})")
    if float(eval_cfg.temperature) < 0:
        raise ConfigError("eval.temperature: must be >= 0 (0 = greedy)")
    if eval_cfg.temperature == 0 and int(eval_cfg.samples) > 1:
        raise ConfigError("eval.samples: > 1 needs eval.temperature > 0 (greedy samples are all the same)")


def check_data_config(data_cfg: DictConfig) -> None:
    """Raise ConfigError for an unknown `data.source`, or a local source without a folder."""
    if data_cfg.source not in DATA_SOURCES:
        raise ConfigError(f"data.source: {data_cfg.source!r} is not one of {DATA_SOURCES}")
    if data_cfg.source == "local" and (data_cfg.path is None or not Path(str(data_cfg.path)).is_dir()):
        raise ConfigError(f"data.path: {data_cfg.path!r} is not a folder (needed by data.source=local)")
