"""Drills for many processes, run by tests/engines/test_distributed.py and tests/engines/test_gpu_sweep.py through
the real launchers.

Reward functions, joined as `+reward.custom.<name>={_target_: tests.rank_drill.<name>, _partial_: true, ...}`:
`fails_on_rank` raises on one rank only (a failure on a rank other than the main one); `killed_on_rank` has one
rank SIGKILL itself (what the kernel's out-of-memory killer does); `records_device` writes down, from inside the
training process, the GPUs it was given and whether the process that started it loaded torch. `python -m
tests.rank_drill` is a two-line program whose rank 1 never reaches the barrier rank 0 waits at; `python -m
tests.rank_drill sweep-end <folder>` ends a sweep whose last job rank 0 records done after rank 1 got there.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil


def fails_on_rank(completions, rank: int, **kwargs) -> list[float]:
    """0 for every completion, except on rank `rank` (torchrun's RANK), which raises."""
    if int(os.environ.get("RANK", "0")) == rank:
        raise RuntimeError(f"reward drill: rank {rank} fails here")
    return [0.0] * len(completions)


def killed_on_rank(completions, rank: int, **kwargs) -> list[float]:
    """0 for every completion, except that rank `rank` (torchrun's RANK) is killed by SIGKILL here."""
    if int(os.environ.get("RANK", "0")) == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    return [0.0] * len(completions)


def records_device(completions, out: str, **kwargs) -> list[float]:
    """0 for every completion; appends to `<out>/<pid>.jsonl` this process's CUDA_VISIBLE_DEVICES, its run
    directory, when it started and when this call ran, and whether its parent (the job that started it) has
    torch's library mapped."""
    from hydra.core.hydra_config import HydraConfig

    this = psutil.Process()
    parent_maps = [m.path for m in psutil.Process(os.getppid()).memory_maps()]
    seen = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "run_dir": HydraConfig.get().runtime.output_dir, "started": this.create_time(), "now": time.time(),
            "parent_loaded_torch": any("libtorch" in path for path in parent_maps)}
    with open(Path(out) / f"{os.getpid()}.jsonl", "a") as fh:
        fh.write(json.dumps(seen) + "\n")
    return [0.0] * len(completions)


def main() -> None:
    """Rank 1 sleeps past the collective timeout; rank 0 waits for it at a barrier."""
    from core.distributed import barrier, start_processes

    processes = start_processes()
    if processes.rank == 1:
        time.sleep(600)
    barrier(processes)


def sweep_end(sweep: str) -> None:
    """A sweep's last job ends on rank 1 first: rank 1 reaches the sweep's end at once while rank 0 records the
    job's run `done` a second later (only the main process writes run.json), then ends the sweep too."""
    from omegaconf import OmegaConf

    from conf.sweep_end import SweepReportCommand
    from core.distributed import start_processes

    processes = start_processes()
    if processes.is_main:
        time.sleep(1.5)
        (Path(sweep) / "0" / "run.json").write_text('{"status": "done"}')
    SweepReportCommand().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": sweep}}}))


if __name__ == "__main__":
    import sys

    sweep_end(sys.argv[2]) if sys.argv[1:2] == ["sweep-end"] else main()
