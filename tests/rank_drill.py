"""Drills for many processes, run by tests/test_distributed.py through the real launchers.

`fails_on_rank` is a reward function (joined as `+reward.custom.<name>={_target_: tests.rank_drill.fails_on_rank,
...}`) that raises on one rank only: a failure on a rank other than the main one. `python -m tests.rank_drill`
is a two-line program whose rank 1 never reaches the barrier rank 0 waits at.
"""

from __future__ import annotations

import os
import time


def fails_on_rank(completions, rank: int, **kwargs) -> list[float]:
    """0 for every completion, except on rank `rank` (torchrun's RANK), which raises."""
    if int(os.environ.get("RANK", "0")) == rank:
        raise RuntimeError(f"reward drill: rank {rank} fails here")
    return [0.0] * len(completions)


def main() -> None:
    """Rank 1 sleeps past the collective timeout; rank 0 waits for it at a barrier."""
    from core.distributed import barrier, start_processes

    processes = start_processes()
    if processes.rank == 1:
        time.sleep(600)
    barrier(processes)


if __name__ == "__main__":
    main()
