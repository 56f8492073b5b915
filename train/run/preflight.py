"""What a run will cost, said before it starts: the completions it generates in training and validation,
their token budgets, and on a machine without CUDA a warning when the recipe is GPU-sized.

The token count is an upper bound (every completion at its budget); the time on a CPU is that bound
at the rate `make demo` measured (`CPU_TOKENS_PER_SECOND`), so it is a rough ceiling, not a forecast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from curriculum.plan import Stage, grpo_batch, validation_completions
from eval.generation import CPU_TOKENS_PER_SECOND, CPU_WARN_HOURS
from eval.settings import ValidationSettings
from train.console import duration

CPU_SIZED = ("experiment=cpu_demo (SmolLM2-135M, the whole recipe in ~20-30 min) or experiment=smoke "
             "(a tiny random model, ~1 min)")


@dataclass(frozen=True)
class RunSize:
    """What a run generates: GRPO steps and completions with their budget, SFT steps, validation completions.

    Training completions count every process (each takes its own per-device batch); validation's are
    shared out over the processes, so their number is one process's.
    """

    stages: int
    grpo_steps: int
    sft_steps: int
    train_completions: int
    train_tokens: int  # upper bound: every completion at max_completion_length
    max_completion_length: int  # the largest of the stages
    validation_completions: int
    validation_tokens: int  # upper bound: every completion at eval.max_new_tokens
    max_new_tokens: int
    processes: int = 1

    @property
    def tokens(self) -> int:
        return self.train_tokens + self.validation_tokens

    def describe(self) -> str:
        """
        >>> RunSize(5, 50, 0, 3200, 3200 * 4096, 4096, 2000, 2000 * 4096, 4096).describe()
        'size: 5 stages; training 50 GRPO steps, 3200 completions of <= 4096 tokens; validation 2000 \
completions of <= 4096 tokens; at most 21.3M generated tokens'
        >>> RunSize(1, 2, 0, 16, 16 * 16, 16, 8, 8 * 16, 16, processes=2).describe()
        'size: 1 stage on 2 processes; training 2 GRPO steps, 16 completions of <= 16 tokens; validation 8 \
completions of <= 16 tokens; at most 384 generated tokens'
        """
        sft = f", {self.sft_steps} SFT steps" if self.sft_steps else ""
        stages = f"{self.stages} stage{'s' if self.stages != 1 else ''}"
        stages += f" on {self.processes} processes" if self.processes > 1 else ""
        return (f"size: {stages}; training {self.grpo_steps} GRPO steps{sft}, {self.train_completions} "
                f"completions of <= {self.max_completion_length} tokens; validation {self.validation_completions} "
                f"completions of <= {self.max_new_tokens} tokens; at most {_millions(self.tokens)} generated tokens")


def _millions(tokens: int) -> str:
    return f"{tokens / 1e6:.1f}M" if tokens >= 1e5 else f"{tokens:,}"


def run_size(grpo: Mapping, plan: Sequence[Stage], validation: ValidationSettings, processes: int = 1) -> RunSize:
    """The size of `plan` under the `grpo` group (with each stage's overrides) and the validation settings, on
    `processes` processes (TRL's batch arithmetic: each process generates its per-device batch)."""
    grpo_steps = sft_steps = completions = tokens = longest = 0
    for stage in plan:
        if not stage.kind_facts.learns_from_rewards:  # trains on given text (SFT): generates nothing
            sft_steps += stage.steps
            continue
        fields: Mapping = {**grpo, **stage.overrides}
        batch = grpo_batch(fields, "grpo", processes)
        per_step = round(batch.prompts_per_step * batch.num_generations)
        length = int(fields.get("max_completion_length") or 256)  # TRL's default when null
        grpo_steps += stage.steps
        completions += stage.steps * per_step
        tokens += stage.steps * per_step * length
        longest = max(longest, length)
    v = validation
    validated = validation_completions(v.eval.subsets_after_stage, v.subsets, plan, v.eval.n * v.eval.samples)
    return RunSize(len(plan), grpo_steps, sft_steps, completions, tokens, longest, validated,
                   validated * v.eval.max_new_tokens, v.eval.max_new_tokens, processes)


def cpu_warning(size: RunSize, model_name: str) -> str | None:
    """A warning when `size` would take more than CPU_WARN_HOURS on a CPU, with how to get a CPU-sized run.

    >>> print(cpu_warning(RunSize(5, 50, 0, 3200, 3200 * 4096, 4096, 2000, 2000 * 4096, 4096), "qwen"))
    ... # doctest: +NORMALIZE_WHITESPACE
    no CUDA GPU: this recipe is GPU-sized (model qwen, up to 21.3M generated tokens). At ~30 tokens/s (a 135M
    model on a 2-core CPU in make demo; a larger model is slower) that is up to ~197 h 12 min. For a CPU-sized
    run: experiment=cpu_demo (SmolLM2-135M, the whole recipe in ~20-30 min) or experiment=smoke (a tiny random
    model, ~1 min)
    >>> cpu_warning(RunSize(6, 12, 16, 96, 96 * 160, 160, 48, 48 * 160, 160), "smollm2-135m") is None
    True
    """
    seconds = size.tokens / CPU_TOKENS_PER_SECOND
    if seconds < CPU_WARN_HOURS * 3600:
        return None
    return (f"no CUDA GPU: this recipe is GPU-sized (model {model_name}, up to {_millions(size.tokens)} generated "
            f"tokens). At ~{CPU_TOKENS_PER_SECOND:.0f} tokens/s (a 135M model on a 2-core CPU in make demo; a larger "
            f"model is slower) that is up to ~{duration(seconds)}. For a CPU-sized run: {CPU_SIZED}")
