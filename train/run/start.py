"""What a run takes hold of before its stage loop, for the whole run (the directory's lock, torch's CPU threads, the
process's vLLM engine), and what it will cost, said before it starts (an upper bound: every completion at its budget).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from conf.schema import RESUME_FREE_KEYS
from core.checks import ConfigError
from core.distributed import Processes, broadcast, on_main
from core.models import configure_cpu_threads
from core.rundir.files import ERROR, RunLock, RunLockedError
from core.rundir.manifest import check_process_count, check_same_config
from curriculum.plan import Stage, grpo_batch, validation_completions
from eval.generation import CPU_TOKENS_PER_SECOND, CPU_WARN_HOURS
from eval.settings import ValidationSettings, validation_backend
from eval.vllm_engine import ProcessEngine, engine_arguments, validation_arguments
from train.console import duration
from train.settings import RunSettings

log = logging.getLogger(__name__)


def process_engine(settings: RunSettings, base: str, processes: Processes) -> ProcessEngine | None:
    """The run's one vLLM engine in this process (started with TRL's arguments where a stage rolls out through it),
    None where nothing generates through vLLM; never shut down under a launcher (it would take its process group)."""
    kinds, validation = settings.kinds, settings.validation
    rollouts = next((found for stage in settings.plan
                     if (found := kinds[stage.kind].rollout_engine(stage, processes.rank)) is not None), None)
    if rollouts is None and validation_backend(validation.eval.backend, base, processes) != "vllm":
        return None
    arguments = rollouts or validation_arguments(validation.eval.vllm_gpu_memory_utilization, validation.eval.seed)
    return ProcessEngine(engine_arguments(arguments, rollouts=rollouts is not None), rollouts=rollouts is not None,
                         shutdown_at_close=not processes.many)


@contextmanager
def run_lock(run_dir: Path, processes: Processes, resolved: dict, planned: list[str]) -> Iterator[None]:
    """The run directory's lock, held by the main process; every rank leaves with its refusal (another holder,
    process count or config). Holding it, the main process removes a failed attempt's error.txt before any rank can
    fail and create one."""
    with ExitStack() as held:
        refusal = None
        if processes.is_main:
            try:
                held.enter_context(RunLock(run_dir))
                check_process_count(run_dir, processes.world_size)
                check_same_config(run_dir, resolved, planned, RESUME_FREE_KEYS)
                (run_dir / ERROR).unlink(missing_ok=True)
            except (RunLockedError, ConfigError, RuntimeError) as err:
                refusal = err
        refusal = broadcast(refusal, processes)
        if refusal is not None:
            raise refusal
        yield


def run_threads(recorded: int | None, setting, processes: Processes) -> int:
    """The CPU threads torch uses for the whole run, set on every rank: a resume's are those `recorded` (another count
    sums floats in another order); a new run's `cpu_threads`, measured once by the main process where auto."""
    if recorded is None:
        chosen = on_main(lambda: configure_cpu_threads(setting), processes)
        log.info("torch CPU threads: %d (cpu_threads=%s)", chosen, setting)
    else:
        chosen = recorded
        note = "" if setting == recorded else f"; cpu_threads={setting} is not used: another count changes float sums"
        log.info("torch CPU threads: %d, as the run was started with (run.json)%s", chosen, note)
    return configure_cpu_threads(chosen)


CPU_SIZED = ("experiment=cpu_demo (SmolLM2-135M, the whole recipe in ~20-30 min) or experiment=smoke "
             "(a tiny random model, ~1 min)")


@dataclass(frozen=True)
class RunSize:
    """What a run generates (training completions over every process; validation's are shared out)."""

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
                f"completions of <= {self.max_new_tokens} tokens; at most "
                f"{_millions(self.train_tokens + self.validation_tokens)} generated tokens")


def _millions(tokens: int) -> str:
    return f"{tokens / 1e6:.1f}M" if tokens >= 1e5 else f"{tokens:,}"


def run_size(grpo: Mapping, plan: Sequence[Stage], validation: ValidationSettings, processes: int = 1) -> RunSize:
    """The size of `plan` under the `grpo` group (and each stage's overrides) on `processes` processes."""
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
    sizes = dict.fromkeys(v.subsets, v.eval.n * v.eval.samples)
    validated = sum(validation_completions(v.eval.subsets_after_stage, v.subsets, plan, sizes).values())
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
    tokens = size.train_tokens + size.validation_tokens
    seconds = tokens / CPU_TOKENS_PER_SECOND
    if seconds < CPU_WARN_HOURS * 3600:
        return None
    return (f"no CUDA GPU: this recipe is GPU-sized (model {model_name}, up to {_millions(tokens)} generated "
            f"tokens). At ~{CPU_TOKENS_PER_SECOND:.0f} tokens/s (a 135M model on a 2-core CPU in make demo; a larger "
            f"model is slower) that is up to ~{duration(seconds)}. For a CPU-sized run: {CPU_SIZED}")
