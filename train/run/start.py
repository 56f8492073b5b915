"""What a run takes hold of before its stage loop, each for the whole run: the run directory's lock (the main process
holds it; the other ranks wait for it or leave with its refusal), the CPU thread count torch uses, and the process's
vLLM engine (one per process: eval/vllm_engine.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from core.checks import ConfigError
from core.distributed import Processes, broadcast, on_main
from core.models import configure_cpu_threads
from core.rundir.layout import ERROR
from core.rundir.lock import RunLock, RunLockedError
from core.rundir.manifest import check_process_count, check_same_config
from eval.settings import validation_backend
from eval.vllm_engine import ProcessEngine, engine_arguments, validation_arguments
from train.settings import RunSettings

log = logging.getLogger(__name__)


def process_engine(settings: RunSettings, base: str, processes: Processes) -> ProcessEngine | None:
    """The run's one vLLM engine in this process (eval/vllm_engine.py), where anything generates through vLLM: a
    stage's rollouts (TRL's colocate mode: started with TRL's arguments, so every stage's trainer takes it) or
    validation (`eval.backend`); None where nothing does. It starts when first used; under a launcher it is never
    shut down (vLLM's shutdown destroys the launcher's default process group)."""
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
    """The run directory's lock, held by the main process for the run; the other ranks wait until it has
    it, or leave with its refusal (on every rank, nothing written): RunLockedError, or a ConfigError for a
    run being continued on another number of processes or with another config (`resolved`; `planned`: the
    plan's stage names, which run.json's entries must follow).

    Once it holds the lock and the run may go on, the main process removes a failed attempt's error.txt
    (this attempt records its own), before any other rank can fail and create one.
    """
    with ExitStack() as held:
        refusal = None
        if processes.is_main:
            try:
                held.enter_context(RunLock(run_dir))
                check_process_count(run_dir, processes.world_size)
                check_same_config(run_dir, resolved, planned)
                (run_dir / ERROR).unlink(missing_ok=True)
            except (RunLockedError, ConfigError, RuntimeError) as err:
                refusal = err
        refusal = broadcast(refusal, processes)
        if refusal is not None:
            raise refusal
        yield


def run_threads(recorded: int | None, setting, processes: Processes) -> int:
    """The CPU threads torch uses for the whole run, set on every rank and returned (run.json records them).

    A resume takes the count run.json `recorded`, whatever its own `cpu_threads`: another count sums floats in
    another order, and the stages it trains would not be the run's. A new run takes `cpu_threads`: a number, or
    auto, measured once, here, by the main process (a busy machine may pick 1 thread where an idle one picks
    all), and kept to the end: a count that followed the machine's load would change the run with it.
    """
    if recorded is None:
        chosen = on_main(lambda: configure_cpu_threads(setting), processes)
        log.info("torch CPU threads: %d (cpu_threads=%s)", chosen, setting)
    else:
        chosen = recorded
        note = "" if setting == recorded else f"; cpu_threads={setting} is not used: another count changes float sums"
        log.info("torch CPU threads: %d, as the run was started with (run.json)%s", chosen, note)
    return configure_cpu_threads(chosen)
