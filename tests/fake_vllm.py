"""A stand-in for the `vllm` package at the unit-test edge: this machine has no CUDA, so no vLLM.

Its `LLM` generates greedily with transformers, one prompt at a time from the token ids it is given,
and answers in vLLM's shapes and conventions: `token_ids` end with the end-of-sequence token when
one stopped the completion, `text` is decoded without special tokens, `finish_reason` is "length"
when `max_tokens` cut it off. It records how it was started and every sleep and wake-up, so tests
can check what the product asked of vLLM; what vLLM itself does with that is never run here.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


class SamplingParams:
    def __init__(self, **settings):
        self.__dict__.update(settings)


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)


class LLM:
    started: list[LLM] = []  # every engine started, in order (reset by the `fake_vllm` fixture)

    def __init__(self, model: str, **settings):
        self.model_path, self.settings, self.calls = model, settings, []
        self.model = AutoModelForCausalLM.from_pretrained(model).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.eos_ids |= {self.tokenizer.eos_token_id} - {None}
        LLM.started.append(self)

    @torch.no_grad()
    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert sampling_params.temperature == 0 and sampling_params.n == 1, "the stand-in is greedy only"
        self.calls.append(("generate", len(prompts)))
        return [self._one(p["prompt_token_ids"], sampling_params.max_tokens) for p in prompts]

    def _one(self, ids: list[int], max_tokens: int) -> RequestOutput:
        out = self.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  max_new_tokens=max_tokens, do_sample=False, temperature=None, top_p=None,
                                  top_k=None, repetition_penalty=1.0, eos_token_id=sorted(self.eos_ids),
                                  pad_token_id=self.tokenizer.pad_token_id)
        new = out[0, len(ids):].tolist()
        end = next((k for k, tok in enumerate(new) if tok in self.eos_ids), None)
        kept = new if end is None else new[: end + 1]
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        return RequestOutput(ids, [CompletionOutput(text, kept, "length" if end is None else "stop")])

    def sleep(self, level: int = 1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags or ())))


def install(monkeypatch) -> types.ModuleType:
    """Put the stand-in where `import vllm` finds it, for one test."""
    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", None)  # importlib.util.find_spec asks for one
    module.LLM, module.SamplingParams = LLM, SamplingParams
    LLM.started = []
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module
