"""`eval.backend=vllm` (or `auto`, where vLLM can): validation generation through vLLM.

Where the engine comes from:
- the baseline, after a stage and `python -m eval`: the process's one engine (eval/vllm_engine.py
  `ProcessEngine`, shared with the stages' rollouts), holding the validated checkpoint's weights;
- inside a GRPO stage that rolls out through vLLM in colocate mode (`eval.every`, `promote`):
  `ColocatedEngine`, the trainer's own engine (TRL 1.16 keeps it at `trainer.vllm_generation.llm`),
  lent between optimizer steps: the live policy is pushed into it as TRL does before a rollout
  (`sync_weights`), it generates, and (with sleep mode, CUDA) goes back to sleep so that the next
  rollout syncs again.

An engine in this process changes the process: vLLM reseeds random, numpy and torch, adds variables to
os.environ (TRL's launcher variables, which make a later trainer think it was launched distributed, and
vLLM's own) and, on CPU, replaces `torch.set_num_threads` (eval/vllm_cpu.py). `process_kept` puts all of
it back, so a run is the same whichever engines ran before.

Either way the prompts are the `prompt_ids` of `prompt_text`, the tokens GRPO trains on and HF
generation feeds, given to vLLM as token ids (it never re-tokenizes); greedy at temperature 0, no
repetition penalty (as HF validation and TRL's rollouts); the grader downstream is the same. Each
`generate` returns the completions and their `GenerationCost` (the engine's start counted once).
"""

from __future__ import annotations

import functools
import importlib.machinery
import logging
import os
import random
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from transformers import AutoConfig

from core.distributed import SINGLE, Processes, launched_world_size
from core.trl_internals import mark_weights_asleep, mark_weights_loaded
from curriculum.prompts import prompt_ids, prompt_text
from eval.cost import GenerationCost, timed_generation
from eval.generation import Completion
from eval.vllm_cpu import thread_setting_kept

log = logging.getLogger(__name__)


def vllm_installed() -> bool:
    """Whether vLLM is on the path, asked of the path itself: `core.models.defer_vllm` hides it from importers."""
    return importlib.machinery.PathFinder.find_spec("vllm") is not None


def vllm_log_level() -> str:
    """What vLLM logs in this process: VLLM_LOGGING_LEVEL where the user set it, else errors only. Its
    start-up notes (Triton found without its backends, libtcmalloc not preloaded, every engine's
    configuration, ~40 lines an engine) would fill the run's console between validation tables."""
    return os.environ.get("VLLM_LOGGING_LEVEL", "ERROR").upper()


def import_vllm():
    """The vllm package, loaded now even where `core.models.defer_vllm` kept it unloaded (validation chose it),
    its import quiet to `vllm_log_level` (vLLM 0.31 sets its loggers' levels only as an engine starts)."""
    if "vllm" in sys.modules and sys.modules["vllm"] is None:
        del sys.modules["vllm"]
    logging.getLogger("vllm").setLevel(vllm_log_level())
    import vllm

    return vllm


def head_size(model_path: str) -> int:
    """The attention head size of the model at `model_path` (its config's head_dim, else hidden / heads)."""
    config = AutoConfig.from_pretrained(model_path)
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


# The head sizes vLLM 0.31's CPU attention takes (`CPUAttentionBackend.get_supported_head_sizes()`; a test
# holds this copy to it), here so that `auto` can turn down a model without loading vLLM (~2 s, and its noise).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def why_not_vllm(model_path: str, processes: Processes = SINGLE) -> str | None:
    """None where vLLM can validate the model at `model_path` here, else why not, in a few words."""
    if processes.many:
        return f"{processes.world_size} processes (one vLLM engine validates in one process)"
    if not vllm_installed():
        return "vLLM is not installed (pip install -e '.[vllm]')"
    size = head_size(model_path)
    # without CUDA vLLM runs its CPU build, with one attention; CUDA picks among several (FlexAttention: any size)
    if not torch.cuda.is_available() and size not in CPU_HEAD_SIZES:
        return f"vLLM's CPU attention takes head sizes {list(CPU_HEAD_SIZES)}, not {size}"
    try:
        import_vllm()
    except Exception as err:  # installed but broken (a torch it was not built for): validation still runs
        return f"vLLM does not load ({type(err).__name__}: {err})"
    return None


def validation_backend(setting: str, model_path: str, processes: Processes = SINGLE) -> str:
    """The backend a validation generates with: `eval.backend` as set, or for `auto` vLLM wherever it can
    validate this model here (else HF, saying why once per process)."""
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


def to_completions(outputs: Sequence, tokenizer) -> list[list[Completion]]:
    """vLLM's request outputs (in prompt order) as Completions: the generated token count (end-of-sequence
    included, as HF validation counts), whether `max_tokens` cut it off, and the text decoded from the tokens
    as HF validation decodes them (`eval.generation`: the end-of-sequence token dropped, special tokens
    skipped). vLLM's own detokenizer holds back the bytes of a character a token leaves unfinished where
    `decode` writes U+FFFD: equal tokens made unequal texts."""
    return [[Completion(text=tokenizer.decode(o.token_ids[:-1] if o.finish_reason == "stop" else o.token_ids,
                                              skip_special_tokens=True),
                        tokens=len(o.token_ids), truncated=o.finish_reason == "length")
             for o in request.outputs] for request in outputs]


def sampling_params(*, max_new_tokens: int, temperature: float, samples: int, seed: int):
    """vLLM's SamplingParams for validation: greedy at temperature 0, else plain sampling (top_p 1, no top_k);
    no detokenizing (`to_completions` decodes)."""
    from vllm import SamplingParams

    return SamplingParams(n=samples, temperature=temperature, top_p=1.0, top_k=0, repetition_penalty=1.0,
                          max_tokens=max_new_tokens, seed=seed, detokenize=False)


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
            lambda: to_completions(self.llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False),
                                   self.tokenizer),
            setup_seconds=setup,
        )


@contextmanager
def process_kept(*, rng: bool) -> Iterator[None]:
    """os.environ, `torch.set_num_threads` and (`rng`) the random states of random, numpy and torch (CPU and
    this process's GPU), as they were before the block, whatever a vLLM engine started inside did to them."""
    environ = dict(os.environ)
    states = (random.getstate(), np.random.get_state()) if rng else None
    devices = [torch.cuda.current_device()] if rng and torch.cuda.is_available() else []
    try:
        with thread_setting_kept(), torch.random.fork_rng(devices=devices, enabled=rng):
            yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        if states is not None:
            random.setstate(states[0])
            np.random.set_state(states[1])


def single_process_env() -> None:
    """The launcher variables TRL 1.16 sets before starting its colocated engine (rank 0 of 1), where unset.

    Outside a launcher the port is one the OS hands out: TRL's `ensure_master_addr_port` takes 29500 whenever it
    looks free, so two processes starting an engine at once on one machine (a parallel sweep's jobs, the test
    workers) both took it and one failed (EADDRINUSE). A launcher's port is its ranks' and is kept.
    """
    from trl.trainer.utils import ensure_master_addr_port

    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(name, value)
    if launched_world_size() <= 1:
        os.environ["MASTER_PORT"] = str(free_port())
    ensure_master_addr_port()


def free_port() -> int:
    """A TCP port on the loopback no process holds now, as the OS picks it (a different one each call)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ColocatedEngine:
    """The GRPO trainer's colocated vLLM engine, lent to in-stage validation between optimizer steps.

    Mirrors TRL 1.16's own bookkeeping around a rollout (`GRPOTrainer._generate_single_turn`,
    `VLLMGeneration.generate`): which step's weights the engine holds, and that they sleep again, are recorded
    as TRL records them (`core.trl_internals`), so the next rollout re-syncs exactly when it would have.
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
        mark_weights_loaded(self.trainer)
        if generation.enable_sleep_mode:
            generation.llm.wake_up(tags=["kv_cache"])
        try:
            yield VllmEngine(generation.llm, tokenizer, "vllm-colocated", time.perf_counter() - began)
        finally:
            if generation.enable_sleep_mode:
                generation.llm.sleep(level=2)
                mark_weights_asleep(generation)  # the next rollout pushes the weights again
