"""What generating a validation cost: wall seconds and generated tokens, per subset and per validation.

Every subset row of a validation carries its `cost` ({backend, seconds, setup_seconds, tokens,
completions}); `setup_seconds` (loading the model or starting a vLLM engine) is counted once, on the
subset that paid it, so the sum over a validation's rows is what it cost (`validation_cost`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from core.rundir.records import row_level

# Generated tokens per second of a whole GRPO step (generation and the update) with SmolLM2-135M on the
# project's 2-core CPU, from `make demo`'s 2ppl stage (metrics.jsonl: 8 steps x 8 completions x mean length
# over their step_time). A larger model is slower in proportion to its size.
CPU_TOKENS_PER_SECOND = 30.0
# Above this many hours (at that rate) a CPU start is warned about.
CPU_WARN_HOURS = 1.0


@dataclass(frozen=True)
class GenerationCost:
    """The cost of generating one subset's completions."""

    backend: str  # hf | vllm (a fresh engine) | vllm-colocated (the GRPO trainer's own engine)
    seconds: float  # wall seconds generating
    setup_seconds: float  # starting the backend, on the subset that started it (else 0)
    tokens: int  # generated tokens, end-of-sequence included, over every sample
    completions: int

    def as_dict(self) -> dict:
        return asdict(self)


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
