"""Batched HF generation for validation, batches bucketed by prompt length, and what generating cost. No repetition
penalty whatever the model's generation config says (TRL and vLLM use none); with many processes each rank generates
every world_size-th batch, seeded by its number, so the gathered completions equal one process's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from core.distributed import SINGLE, Processes, gather
from core.rundir.records import row_level
from curriculum.prompts import prompt_ids, prompt_text

# Generated tokens per second of a GRPO step, SmolLM2-135M on 2 CPU cores (`make demo`), and when to warn of a CPU run
CPU_TOKENS_PER_SECOND = 30.0
CPU_WARN_HOURS = 1.0


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int  # generated tokens, up to and including the end-of-sequence token
    truncated: bool  # hit max_new_tokens without an end-of-sequence token


@dataclass(frozen=True)
class GenerationCost:
    backend: str  # hf | vllm (the process's engine) | vllm-colocated (the GRPO trainer's own engine)
    seconds: float  # wall seconds generating
    setup_seconds: float  # starting the backend, on the subset that started it (else 0)
    tokens: int  # generated tokens, end-of-sequence included, over every sample
    completions: int


def timed_generation(backend: str, generate: Callable[[], list], *, setup_seconds: float = 0.0):
    """Run `generate()` (-> completions per prompt) and return (completions, its GenerationCost)."""
    began = time.perf_counter()
    completions = generate()
    seconds = time.perf_counter() - began
    flat = [c for outs in completions for c in outs]
    cost = GenerationCost(backend, round(seconds, 3), round(setup_seconds, 3), sum(c.tokens for c in flat), len(flat))
    return completions, cost


def validation_cost(rows: Sequence[Mapping]) -> dict | None:
    """One validation's cost from its subset rows (what run.json records per validation); None without costs.

    >>> rows = [{"level": "2ppl", "cost": {"backend": "vllm", "seconds": 3.0, "setup_seconds": 20.0, "tokens": 900,
    ...                             "completions": 100}},
    ...         {"level": "3ppl", "cost": {"backend": "vllm", "seconds": 5.0, "setup_seconds": 0.0, "tokens": 1500,
    ...                             "completions": 100}}]
    >>> cost = validation_cost(rows)
    >>> cost["subsets"], cost["seconds"], cost["setup_seconds"], cost["tokens"], cost["tokens_per_second"]
    (['2ppl', '3ppl'], 28.0, 20.0, 2400, 300.0)
    """
    costs = [(row_level(row), row["cost"]) for row in rows if isinstance(row.get("cost"), Mapping)]
    if not costs:
        return None
    generating = sum(float(c["seconds"]) for _, c in costs)
    setup = sum(float(c["setup_seconds"]) for _, c in costs)
    tokens = sum(int(c["tokens"]) for _, c in costs)
    backends = sorted({str(c["backend"]) for _, c in costs})
    return {
        "backend": "+".join(backends), "subsets": [level for level, _ in costs],
        "seconds": round(generating + setup, 3), "setup_seconds": round(setup, 3), "tokens": tokens,
        "completions": sum(int(c["completions"]) for _, c in costs),
        "tokens_per_second": round(tokens / generating, 1) if generating > 0 else None,
    }


@torch.no_grad()
def generate(model, tokenizer, prompts: list, *, max_new_tokens: int, temperature: float = 0.0,
             samples: int = 1, batch_size: int = 32, chat_kwargs: dict | None = None, seed: int = 0,
             label: str = "generating", processes: Processes = SINGLE) -> list[list[Completion]]:
    """`samples` completions for each prompt, in prompt order (with many `processes`: on every rank)."""
    texts = [prompt_text(p, tokenizer, chat_kwargs) for p in prompts]
    lengths = [len(prompt_ids(t, tokenizer)) for t in texts]
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    mine = range(processes.rank, len(batches), processes.world_size)
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
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


@dataclass
class HfEngine:
    """`generate` on a loaded model, with the interface of `eval.vllm_engine.VllmEngine`."""

    model: Any
    tokenizer: Any
    batch_size: int
    setup_seconds: float = 0.0  # loading the model: counted on the first subset, then 0
    processes: Processes = SINGLE  # the batches are shared out over them
    backend = "hf"

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
    # synced_gpus off: the model is whole here (else, once a ZeRO-3 trainer exists, every step syncs with the ranks)
    out = model.generate(
        **enc, max_new_tokens=max_new_tokens, num_return_sequences=samples, repetition_penalty=1.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=sorted(eos_ids), synced_gpus=False, **sampling,
    )
    completions = []
    for ids in out[:, enc["input_ids"].shape[1]:].tolist():
        end = next((k for k, tok in enumerate(ids) if tok in eos_ids), None)
        kept = ids if end is None else ids[: end + 1]
        text = tokenizer.decode(kept if end is None else kept[:-1], skip_special_tokens=True)
        completions.append(Completion(text, len(kept), end is None and len(kept) >= max_new_tokens))
    return completions
