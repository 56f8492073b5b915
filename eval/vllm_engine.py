"""The one vLLM engine of a process: every validation and every stage's rollouts share it.

Why one: with sleep mode on CUDA, vLLM allocates through its CuMem allocator, which serves one engine per
process (vLLM 0.31 `v1/worker/gpu_worker.py` `_maybe_get_memory_pool_context` asserts "CuMem allocator can
only be used for one instance per process" when a second engine loads its weights while the first one's
allocations are tracked), and an allocation freed while its engine sleeps is handed back twice
(`vllm/device_allocator/cumem.py`). vLLM's CPU build skips the allocator, so only the tests' guard
(tests/engine_guard.py) holds a CPU run to the rule.

The engine's life in a run (docs/gpu.md draws it):
- started once, by whichever needs it first: the baseline validation (from the base model) or a stage's
  trainer (TRL's colocated engine, `for_trainer`), with the arguments `engine_arguments` gives, which are
  TRL's own for its colocated engine when the run rolls out through vLLM, so TRL can take it as its own;
- each validation of a checkpoint loads that checkpoint's weights into it in place (`load_checkpoint`: as TRL
  pushes the policy before every rollout, or through vLLM's own reload where no trainer pushes into it),
  waking it first and putting it back to sleep after where it sleeps (CUDA);
- each stage's trainer gets it awake in place of the engine TRL would start (`for_trainer`); TRL pushes the
  policy before its first rollout and sleeps it between rollouts as it always does;
- at the end (`close`) it is woken first (never freed asleep), then shut down in one process; under a
  launcher it is never shut down (vLLM's shutdown takes the launcher's default process group with it).
"""

from __future__ import annotations

import gc
import logging
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

from core.models import device_settings
from core.parse_limits import parse_json
from eval.vllm_backend import VllmEngine, import_vllm, process_kept, single_process_env, vllm_log_level
from eval.vllm_cpu import engine_options, reloadable_weights

log = logging.getLogger(__name__)

# What TRL 1.16 asks of its colocated engine (`VLLMGeneration._init_vllm`) beyond the GRPOConfig fields
# `rollout_arguments` reads: the batch-token budget (vLLM's profiler is misled by its larger default) and
# log-probs after temperature (TRL's importance-sampling correction reads them).
TRL_FIXED = {"distributed_executor_backend": "external_launcher", "max_num_batched_tokens": 4096,
             "logprobs_mode": "processed_logprobs", "quantization": None}
# TRL's arguments the process's engine may differ in: which checkpoint it starts from (its weights are pushed
# before every rollout), the seed (reseeded as an engine start seeds it, `for_trainer`) and how many sequences
# it schedules at once (a stage's batch; a bound on concurrency, not on what it computes).
TRL_FREE = ("model", "seed", "max_num_seqs")


def rollout_arguments(fields: Mapping, rank: int = 0) -> dict:
    """The arguments TRL 1.16 starts its colocated engine with, from a stage's GRPOConfig `fields` (TRL's
    names, each set: `grpo.GRPOConfig` values) on process `rank` (`trl/generation/vllm_generation.py`
    `_init_vllm`; `GRPOTrainer` computes `max_num_seqs`). A test holds this copy to what TRL passes."""
    tp = int(fields["vllm_tensor_parallel_size"])
    return {"tensor_parallel_size": tp, "gpu_memory_utilization": float(fields["vllm_gpu_memory_utilization"]),
            "max_model_len": fields["vllm_max_model_length"],
            "max_num_seqs": int(fields["per_device_train_batch_size"]) * tp * int(fields["steps_per_generation"]),
            "enable_sleep_mode": bool(fields["vllm_enable_sleep_mode"]), "model_impl": fields["vllm_model_impl"],
            "seed": rank // tp, "trust_remote_code": bool(fields["trust_remote_code"]), **TRL_FIXED}


def validation_arguments(gpu_memory_utilization: float, seed: int) -> dict:
    """The arguments of an engine that only validates (rollouts through HF or a server): TRL's colocate
    settings for one process, its card share `eval.vllm_gpu_memory_utilization`."""
    return {"tensor_parallel_size": 1, "gpu_memory_utilization": gpu_memory_utilization, "seed": seed,
            "distributed_executor_backend": "external_launcher", "max_num_batched_tokens": 4096}


def engine_arguments(base: Mapping, *, rollouts: bool) -> dict:
    """`base` (`rollout_arguments`, with `rollouts`, or `validation_arguments`) with this platform's options over
    it (eval/vllm_cpu.py `engine_options`: on CPU no sleep mode, a KV cache in RAM, eager), sleep mode on CUDA
    where the rollouts do not decide it (an engine that only validates sleeps while the stages train) and vLLM's
    log level. An engine that only validates generates in the inference dtype (core/models.py: bfloat16 on CUDA,
    float32 on CPU, as HF validation); one that rolls out keeps TRL's (none given: vLLM's `auto`, the base
    model's), and validation through it generates in that dtype too."""
    dtype = {} if rollouts else {"dtype": str(device_settings()["inference_dtype"]).removeprefix("torch.")}
    return {"enable_sleep_mode": True, **base, **engine_options(), **dtype,
            "use_tqdm_on_load": False, "log_level": vllm_log_level()}


class ProcessEngine:
    """This process's vLLM engine for a whole run (or a `python -m eval`): see the module's docstring.

    `rollouts`: the stages' trainers roll out through it (TRL pushes their policy into it before every rollout);
    `shutdown_at_close`: False under a launcher. `starts` and `start_seconds` say what starting it cost.
    """

    def __init__(self, arguments: Mapping, *, rollouts: bool, shutdown_at_close: bool = True):
        self.arguments, self.rollouts = dict(arguments), rollouts
        self.shutdown_at_close = shutdown_at_close
        self.llm: Any = None  # vllm.LLM, once started
        self.starts, self.start_seconds = 0, 0.0

    @property
    def sleeps(self) -> bool:
        return bool(self.arguments.get("enable_sleep_mode"))

    def _start(self, model_path: str) -> None:
        began = time.perf_counter()
        vllm = import_vllm()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # a trainer released just before leaves its blocks to the engine
        single_process_env()
        # TRL's push writes the weights vLLM's CPU build would repack (eval/vllm_cpu.py); vLLM 0.31's kernel
        # dispatcher reads a name torch 2.13 deprecates
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
        """The engine holding the weights at `model_path` for one validation (started from it if it has not
        started), the process as it was before (`process_kept`: vLLM reseeds and adds variables as it starts)."""
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
                if self.sleeps:
                    self.llm.sleep(level=2)  # its weights are loaded again before the next use

    def for_trainer(self, **requested):
        """TRL's `LLM(...)` as a trainer builds its colocated engine (train/stages/grpo.py puts this in its
        place): the process's engine, awake, seeded as a start seeds it; TRL pushes its policy before its
        first rollout. Arguments TRL asks for that the engine was not started with are refused by name."""
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
    """The weights of the checkpoint at `path` into the running engine; the prefix cache emptied (it holds the old
    weights' keys). Into an engine TRL pushes into (`pushed`), as its `sync_weights` pushes a policy: the model's
    `load_weights`, on the weights it keeps reloadable; else through vLLM's own in-place reload from the folder
    (`reload_weights`), which processes the weights as a start does (on CPU: packed, ~1.4x faster to generate)."""
    if pushed:
        model = llm.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(checkpoint_tensors(path))
    else:
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
    llm.reset_prefix_cache()
