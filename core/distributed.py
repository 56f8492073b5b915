"""Many processes, one run: who this process is, and the few collectives the runner needs.

`accelerate launch` and `torchrun` start one process per device, each running `python -m train`
from the top. They share one run directory, which only the main process writes; the others run
the same plan (training needs every rank for its collectives) and wait at barriers. Everything here
is accelerate's (`PartialState`, its object collectives), the engine TRL itself runs on: no process
group code of our own. A single process (no launcher) never starts a process group at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch

# How long a rank waits at a collective for the others. Long enough for the main process to
# publish a final or write a report alone; a dead rank is noticed by the launcher long before.
COLLECTIVE_TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class Processes:
    """This process's place in the launch: its rank, how many there are, and whether it writes the run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def many(self) -> bool:
        return self.world_size > 1

    def label(self) -> str:
        """'rank 1 of 2' (or '' for a single process), for logs and error records.

        >>> Processes(1, 2).label(), Processes().label()
        ('rank 1 of 2', '')
        """
        return f"rank {self.rank} of {self.world_size}" if self.many else ""


SINGLE = Processes()


def launched_world_size() -> int:
    """The number of processes a launcher (torchrun, accelerate launch, SLURM via accelerate) started.

    >>> launched_world_size() >= 1
    True
    """
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def start_processes() -> Processes:
    """Join the launch's process group (accelerate's PartialState) when there are many processes.

    On a machine without CUDA the group runs on gloo (accelerate's MULTI_CPU), as the trainer will
    with `use_cpu=True`: PartialState is a singleton, so the first to create it decides, and this
    must agree with what TRL's TrainingArguments would ask for.
    """
    if launched_world_size() <= 1:
        return SINGLE
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available(), timeout=COLLECTIVE_TIMEOUT)
    return Processes(state.process_index, state.num_processes, state.local_process_index)


def barrier(processes: Processes) -> None:
    """Every rank waits here until all have arrived (nothing to do for one process)."""
    if processes.many:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def broadcast(value, processes: Processes):
    """The main process's `value`, on every rank (any picklable object)."""
    if not processes.many:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value if processes.is_main else None]
    broadcast_object_list(box, from_process=0)
    return box[0]


def gather(value, processes: Processes) -> list:
    """Every rank's `value`, in rank order, on every rank."""
    if not processes.many:
        return [value]
    from accelerate.utils import gather_object

    return gather_object([value])  # accelerate flattens the per-rank lists: one value per rank
