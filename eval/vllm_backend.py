"""Validation generation through vLLM (`eval.backend=vllm`, or `auto` where vLLM can: eval/settings.py).

The engine is the process's one (eval/vllm_engine.py `ProcessEngine`) holding the validated checkpoint's weights,
or inside a GRPO stage that rolls out through vLLM in colocate mode (`eval.every`, `promote`) the trainer's own
(`ColocatedEngine`), lent between optimizer steps. The prompts are given as token ids, the `prompt_ids` of
`prompt_text` that GRPO trains on and HF validation feeds (vLLM never re-tokenizes); greedy at temperature 0, no
repetition penalty, as HF validation and TRL's rollouts.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from core.trl_internals import mark_weights_asleep, mark_weights_loaded
from curriculum.prompts import prompt_ids, prompt_text
from eval.generation import Completion, GenerationCost, timed_generation


def vllm_log_level() -> str:
    """What vLLM logs in this process: VLLM_LOGGING_LEVEL where the user set it, else errors only (its start-up
    notes, ~40 lines an engine, would fill the run's console between validation tables)."""
    return os.environ.get("VLLM_LOGGING_LEVEL", "ERROR").upper()


def import_vllm():
    """The vllm package, loaded now even where `core.models.defer_vllm` kept it unloaded (validation chose it),
    its import quiet to `vllm_log_level` (vLLM 0.31 sets its loggers' levels only as an engine starts)."""
    if "vllm" in sys.modules and sys.modules["vllm"] is None:
        del sys.modules["vllm"]
    logging.getLogger("vllm").setLevel(vllm_log_level())
    import vllm

    return vllm


def to_completions(outputs: Sequence, tokenizer) -> list[list[Completion]]:
    """vLLM's request outputs (in prompt order) as Completions, counted and decoded as HF validation does
    (`eval.generation`: end-of-sequence counted, then dropped from the text, special tokens skipped). vLLM's own
    detokenizer holds back the bytes of a character a token leaves unfinished where `decode` writes U+FFFD: equal
    tokens made unequal texts."""
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


class ColocatedEngine:
    """The GRPO trainer's colocated vLLM engine (TRL 1.16: `trainer.vllm_generation.llm`), lent to in-stage
    validation between optimizer steps.

    Mirrors TRL's own bookkeeping around a rollout (`GRPOTrainer._generate_single_turn`, `VLLMGeneration.generate`):
    which step's weights the engine holds, and that they sleep again, are recorded as TRL records them
    (`core.trl_internals`), so the next rollout re-syncs exactly when it would have.
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
