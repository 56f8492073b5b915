"""`eval.backend=vllm`: validation generation through vLLM (CUDA only, the `vllm` extra).

Same contract as `eval.generation.generate`: `samples` completions per prompt, in prompt order,
each with its generated token count and whether it hit `max_new_tokens`. Greedy at temperature 0.
"""

from __future__ import annotations

import importlib.util

import torch

from curriculum.prompts import prompt_text
from eval.generation import Completion


def vllm_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def generate_vllm(model_path: str, tokenizer, prompts: list, *, max_new_tokens: int, temperature: float,
                  samples: int, chat_kwargs: dict | None, seed: int) -> list[list[Completion]]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, seed=seed, gpu_memory_utilization=0.5)
    params = SamplingParams(n=samples, temperature=temperature, top_p=1.0, max_tokens=max_new_tokens, seed=seed)
    texts = [prompt_text(p, tokenizer, chat_kwargs) for p in prompts]
    outputs = llm.generate(texts, params)
    results = [
        [Completion(text=o.text, tokens=len(o.token_ids), truncated=o.finish_reason == "length") for o in out.outputs]
        for out in outputs
    ]
    del llm
    torch.cuda.empty_cache()
    return results
