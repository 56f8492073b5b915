"""Batched generation for validation: left padding, batches bucketed by prompt length, a progress bar.

Prompts are sorted by token length so that each batch pads little; results come back in the
caller's order. Greedy when temperature is 0, with no repetition penalty whatever the model's own
generation config says (Qwen2.5-Instruct's asks 1.05): TRL's rollouts and vLLM validation use none.
`HfEngine` gives a loaded model the interface of `eval.vllm_backend.VllmEngine`.

With many processes the batches are shared out: every rank builds exactly the batches one process
would, generates every world_size-th of them on its own device, and the completions are gathered
back into prompt order on every rank. Each batch is seeded by its own number, so a batch comes out
the same whichever rank generates it: the completions equal one process's (greedy, or sampled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from core.distributed import SINGLE, Processes, gather
from curriculum.prompts import prompt_ids, prompt_text
from eval.cost import GenerationCost, timed_generation


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int  # generated tokens, up to and including the end-of-sequence token
    truncated: bool  # hit max_new_tokens without an end-of-sequence token


def _eos_ids(model, tokenizer) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def my_batches(n_batches: int, processes: Processes) -> range:
    """The batch numbers this process generates: every world_size-th, from its rank.

    >>> list(my_batches(5, Processes(1, 2))), list(my_batches(5, Processes()))
    ([1, 3], [0, 1, 2, 3, 4])
    """
    return range(processes.rank, n_batches, processes.world_size)


@torch.no_grad()
def generate(model, tokenizer, prompts: list, *, max_new_tokens: int, temperature: float = 0.0,
             samples: int = 1, batch_size: int = 32, chat_kwargs: dict | None = None, seed: int = 0,
             label: str = "generating", processes: Processes = SINGLE) -> list[list[Completion]]:
    """`samples` completions for each prompt, in prompt order (with many `processes`: on every rank)."""
    texts = [prompt_text(p, tokenizer, chat_kwargs) for p in prompts]
    lengths = [len(prompt_ids(t, tokenizer)) for t in texts]
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    mine = my_batches(len(batches), processes)
    eos_ids = _eos_ids(model, tokenizer)
    done: dict[int, list[Completion]] = {}  # batch number -> its completions, `samples` per prompt
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True, disable=not processes.is_main) as progress:
        task = progress.add_task(label, total=sum(len(batches[b]) for b in mine))
        for b in mine:
            torch.manual_seed(seed + b)
            done[b] = _generate_batch(model, tokenizer, [texts[i] for i in batches[b]], max_new_tokens,
                                      temperature, samples, eos_ids)
            progress.advance(task, len(batches[b]))
    results: list[list[Completion]] = [[] for _ in texts]
    for part in gather(done, processes):
        for b, outputs in part.items():
            for j, i in enumerate(batches[b]):
                results[i] = outputs[j * samples : (j + 1) * samples]
    return results


class HfEngine:
    """`generate` on a loaded model; `generate` returns the completions and their GenerationCost."""

    backend = "hf"

    def __init__(self, model, tokenizer, *, batch_size: int, setup_seconds: float = 0.0,
                 processes: Processes = SINGLE):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.setup_seconds = setup_seconds  # loading the model: counted on the first subset, then 0
        self.processes = processes  # the batches are shared out over them

    def generate(self, prompts: list, *, label: str = "generating", **settings) -> tuple[list, GenerationCost]:
        setup, self.setup_seconds = self.setup_seconds, 0.0
        return timed_generation(
            self.backend,
            lambda: generate(self.model, self.tokenizer, prompts, batch_size=self.batch_size, label=label,
                             processes=self.processes, **settings),
            setup_seconds=setup,
        )


def encode_prompts(texts: list[str], tokenizer) -> dict:
    """A left-padded batch of prompt texts, each row's tokens exactly `prompt_ids` (what GRPO trained on)."""
    return tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")


def _generate_batch(model, tokenizer, texts, max_new_tokens, temperature, samples, eos_ids) -> list[Completion]:
    enc = {k: v.to(model.device) for k, v in encode_prompts(texts, tokenizer).items()}
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0
        else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None})
    sampling["repetition_penalty"] = 1.0
    # synced_gpus off: the model is whole on this process (transformers would otherwise sync every step with the
    # other ranks once a trainer registered ZeRO-3, while each rank generates its own batches)
    out = model.generate(
        **enc, max_new_tokens=max_new_tokens, num_return_sequences=samples,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=sorted(eos_ids), synced_gpus=False, **sampling,
    )
    new = out[:, enc["input_ids"].shape[1]:].tolist()
    return [_completion(ids, tokenizer, eos_ids, max_new_tokens) for ids in new]


def _completion(ids: list[int], tokenizer, eos_ids: set[int], max_new_tokens: int) -> Completion:
    end = next((k for k, tok in enumerate(ids) if tok in eos_ids), None)
    kept = ids if end is None else ids[: end + 1]
    text = tokenizer.decode(kept if end is None else kept[:-1], skip_special_tokens=True)
    return Completion(text=text, tokens=len(kept), truncated=end is None and len(kept) >= max_new_tokens)
