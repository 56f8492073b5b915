"""`eval.backend=vllm`: validation generation through vLLM (CUDA and the `vllm` extra), one engine per validation.

Where the engine comes from:
- the baseline, after a stage (the trainer and its engine are gone by then) and `python -m eval`:
  `fresh_engine`, started once for all the validation's subsets and released after, with the
  single-process settings TRL 1.16 gives its own colocated engine, so that both can live in one process;
- inside a GRPO stage that rolls out through vLLM in colocate mode (`eval.every`, `promote`):
  `ColocatedEngine`, the trainer's own engine (TRL 1.16 keeps it at `trainer.vllm_generation.llm`),
  lent between optimizer steps: the live policy is pushed into it as TRL does before a rollout
  (`sync_weights`), it generates, and goes back to sleep so that the next rollout syncs again.

Either way the prompts are the `prompt_ids` of `prompt_text`, the tokens GRPO trains on and HF
generation feeds, given to vLLM as token ids (it never re-tokenizes); greedy at temperature 0, no
repetition penalty (as HF validation and TRL's rollouts); the grader downstream is the same. Each
`generate` returns the completions and their `GenerationCost` (the engine's start counted once).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from core.models import device_settings
from curriculum.prompts import prompt_ids, prompt_text
from eval.cost import GenerationCost, timed_generation
from eval.generation import Completion


def vllm_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def to_completions(outputs: Sequence) -> list[list[Completion]]:
    """vLLM's request outputs (in prompt order) as Completions: the text, the generated token count
    (end-of-sequence included, as HF validation counts) and whether `max_tokens` cut it off."""
    return [[Completion(text=o.text, tokens=len(o.token_ids), truncated=o.finish_reason == "length")
             for o in request.outputs] for request in outputs]


def sampling_params(*, max_new_tokens: int, temperature: float, samples: int, seed: int):
    """vLLM's SamplingParams for validation: greedy at temperature 0, else plain sampling (top_p 1, no top_k)."""
    from vllm import SamplingParams

    return SamplingParams(n=samples, temperature=temperature, top_p=1.0, top_k=0, repetition_penalty=1.0,
                          max_tokens=max_new_tokens, seed=seed)


class VllmEngine:
    """A vLLM engine lent to one validation; `generate` has `eval.generation.HfEngine`'s interface."""

    def __init__(self, llm, tokenizer, backend: str, setup_seconds: float = 0.0):
        self.llm, self.tokenizer, self.backend = llm, tokenizer, backend
        self.setup_seconds = setup_seconds  # counted on the first subset generated, then 0

    def generate(self, prompts: list, *, max_new_tokens: int, temperature: float = 0.0, samples: int = 1,
                 chat_kwargs: dict | None = None, seed: int = 0,
                 label: str = "") -> tuple[list[list[Completion]], GenerationCost]:
        """`samples` completions per prompt, in prompt order, and what generating them cost."""
        ids = [prompt_ids(prompt_text(p, self.tokenizer, chat_kwargs), self.tokenizer) for p in prompts]
        params = sampling_params(max_new_tokens=max_new_tokens, temperature=temperature, samples=samples, seed=seed)
        setup, self.setup_seconds = self.setup_seconds, 0.0
        return timed_generation(
            self.backend,
            lambda: to_completions(self.llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False)),
            setup_seconds=setup,
        )


@contextmanager
def single_process_env() -> Iterator[None]:
    """The launcher variables TRL 1.16 sets before starting its colocated engine (rank 0 of 1), for the
    block only: the ones added are removed after, so a trainer started later sees the process as it was."""
    from trl.trainer.utils import ensure_master_addr_port

    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    before = {name: os.environ.get(name) for name in names}
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(name, value)
    ensure_master_addr_port()
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)


def start_llm(model_path: str, *, gpu_memory_utilization: float, seed: int):
    """A vLLM engine as TRL 1.16 starts its colocated one (single process, `external_launcher`, sleep mode).

    Sleep mode lets `fresh_engine` hand the memory back at once when it is done; torch's cache is
    emptied first, so a trainer released just before leaves its blocks to the engine.
    """
    from vllm import LLM

    gc.collect()
    torch.cuda.empty_cache()
    return LLM(
        model=model_path, tensor_parallel_size=1, gpu_memory_utilization=gpu_memory_utilization,
        enable_sleep_mode=True, distributed_executor_backend="external_launcher", seed=seed,
        # TRL's value: vLLM's memory profiler is misled by its larger default
        max_num_batched_tokens=4096,
        dtype=str(device_settings()["inference_dtype"]).removeprefix("torch."),
    )


@contextmanager
def fresh_engine(model_path: str, tokenizer, *, gpu_memory_utilization: float, seed: int) -> Iterator[VllmEngine]:
    """One engine for a whole validation; its GPU memory is returned when the block ends, even on an error."""
    began = time.perf_counter()
    with single_process_env():
        llm = start_llm(model_path, gpu_memory_utilization=gpu_memory_utilization, seed=seed)
        try:
            yield VllmEngine(llm, tokenizer, "vllm", time.perf_counter() - began)
        finally:
            llm.sleep(level=2)  # discards weights and KV cache now, whoever still holds the object
            del llm
            gc.collect()
            torch.cuda.empty_cache()


class ColocatedEngine:
    """The GRPO trainer's colocated vLLM engine, lent to in-stage validation between optimizer steps.

    Mirrors TRL 1.16's own bookkeeping around a rollout (`GRPOTrainer._generate_single_turn`,
    `VLLMGeneration.generate`): the private `_last_loaded_step` and `_llm_weights_sleeping` are set
    as TRL sets them, so the next rollout re-syncs exactly when it would have.
    """

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
        self.trainer._last_loaded_step = self.trainer.state.global_step
        if generation.enable_sleep_mode:
            generation.llm.wake_up(tags=["kv_cache"])
        try:
            yield VllmEngine(generation.llm, tokenizer, "vllm-colocated", time.perf_counter() - began)
        finally:
            if generation.enable_sleep_mode:
                generation.llm.sleep(level=2)
                generation._llm_weights_sleeping = True  # the next rollout pushes the weights again
