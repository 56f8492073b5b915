"""What the vLLM tests compare with: a tiny model whose greedy text follows the prompt, and HF's greedy tokens.

`model=tiny_vllm` (heads of 64, which vLLM's CPU attention takes) writes the same newline after every prompt
at its random init, so equal outputs would say nothing. `peaked_checkpoint` scales its weights (norms kept):
x3 still gave 3 distinct completions of 16 validation prompts, x6 gives 16 of 16.

Greedy tokens through vLLM must be HF's, or part from them where HF's two highest logits tie within float
error (vLLM's CPU kernels and transformers sum in other orders: float32 sums of a few hundred terms differ by
~1e-5 of the logits' size, here ~10): `flips` finds each difference and HF's margin where it parts.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SCALE = 6.0
NEAR_TIE = 1e-3


def peaked_checkpoint(base: str, out: Path, scale: float = SCALE) -> str:
    """`base` with every weight but the norms' multiplied by `scale`, saved (with its tokenizer) to `out`."""
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(scale)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return str(out)


@torch.no_grad()
def hf_greedy(path: str, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """HF's greedy tokens per prompt, one prompt at a time, up to and with the end-of-sequence token."""
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    eos = model.generation_config.eos_token_id
    out = []
    for ids in prompts:
        new = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_new_tokens, do_sample=False, temperature=None, top_p=None,
                             top_k=None, eos_token_id=eos, pad_token_id=model.generation_config.pad_token_id)
        new = new[0, len(ids):].tolist()
        out.append(new[: new.index(eos) + 1] if eos in new else new)
    return out


@torch.no_grad()
def flips(path: str, prompts: list[list[int]], ours: list[list[int]], theirs: list[list[int]]) -> dict[int, float]:
    """{prompt number: HF's top-2 logit margin where `ours` first parts from `theirs` (HF's)}, for each that does."""
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    parted = {}
    for k, (prompt, a, b) in enumerate(zip(prompts, ours, theirs, strict=True)):
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            top = model(torch.tensor([prompt + b[:first]])).logits[0, -1].topk(2).values
            parted[k] = float(top[0] - top[1])
    return parted
