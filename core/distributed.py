"""Many processes, one run: who this process is, and the few collectives (accelerate's) the runner needs. Only the
main process writes the run directory; a single process never starts a process group, nor imports torch here.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

T = TypeVar("T")

# How long a rank waits at a collective (an env variable: the group starts before the config is read)
COLLECTIVE_TIMEOUT_ENV = "KK_COLLECTIVE_TIMEOUT_S"
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Processes:
    """This process's place in the launch; `sharded_by`: what shards the weights (ZeRO-3, FSDP), else None."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    sharded_by: str | None = None

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


def launched_world_size(env: Mapping[str, str] = os.environ) -> int:
    """The number of processes a launcher (torchrun, accelerate launch) started: its WORLD_SIZE.

    >>> launched_world_size({}), launched_world_size({"WORLD_SIZE": "4"})
    (1, 4)
    """
    return int(env.get("WORLD_SIZE", "1") or 1)


def weight_sharding(env: Mapping[str, str] = os.environ) -> str | None:
    """What shards the weights across ranks, as `accelerate launch` tells its processes (its env).

    >>> weight_sharding({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"})
    'DeepSpeed ZeRO-3'
    >>> weight_sharding({"ACCELERATE_USE_FSDP": "true"}), weight_sharding({"ACCELERATE_USE_DEEPSPEED": "true"})
    ('FSDP', None)
    """
    if env.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "FSDP"
    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" and env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return "DeepSpeed ZeRO-3"
    return None


def optimizer_sharding(env: Mapping[str, str] = os.environ) -> str | None:
    """What shards the optimizer's parameters (which bitsandbytes does not take): FSDP, DeepSpeed at any stage.

    >>> optimizer_sharding({"ACCELERATE_USE_FSDP": "true"}), optimizer_sharding({"ACCELERATE_USE_DEEPSPEED": "true"})
    ('FSDP', 'DeepSpeed')
    >>> optimizer_sharding({}) is None
    True
    """
    if env.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "FSDP"
    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return "DeepSpeed"
    return None


def whole_final_problem(env: Mapping[str, str] = os.environ) -> str | None:
    """Why the trainer would not save a final as one whole checkpoint under this launch, or None.

    >>> whole_final_problem({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
    ...                      "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "false"})[:40]
    'accelerate config: zero3_save_16bit_mode'
    >>> whole_final_problem({"ACCELERATE_USE_FSDP": "true", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}) is None
    True
    """
    sharding = weight_sharding(env)
    if sharding == "DeepSpeed ZeRO-3" and env.get("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "").lower() != "true":
        return ("accelerate config: zero3_save_16bit_model must be true under ZeRO-3, so that a stage's final is "
                "one whole checkpoint the next stage loads (conf/accelerate/zero3.yaml sets it)")
    if sharding == "FSDP" and env.get("FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT") != "FULL_STATE_DICT":
        return ("accelerate config: fsdp_state_dict_type must be FULL_STATE_DICT, so that a stage's final is one "
                "whole checkpoint the next stage loads (conf/accelerate/fsdp.yaml sets it)")
    return None


# accelerate 1.15 makes a launch FSDP only on accelerators: on a CPU it becomes DDP over gloo
FSDP_ON_CPU = ("accelerate launch asked for FSDP, which accelerate runs on GPUs only: on this CPU the ranks train "
               "as DDP, each holding the whole model (run.json: stages[k].distributed)")


def collective_timeout(env: Mapping[str, str] = os.environ) -> timedelta:
    """How long a collective waits (KK_COLLECTIVE_TIMEOUT_S, else transformers' 1800 s).

    >>> collective_timeout({}).total_seconds(), collective_timeout({COLLECTIVE_TIMEOUT_ENV: "5"}).total_seconds()
    (1800.0, 5.0)
    """
    return timedelta(seconds=float(env.get(COLLECTIVE_TIMEOUT_ENV) or DEFAULT_COLLECTIVE_TIMEOUT_S))


def start_processes() -> Processes:
    """Join the launch's process group (accelerate's PartialState, shared by the trainer) when there are many."""
    sharded_by = weight_sharding()
    if sharded_by == "FSDP" and not _cuda():  # FSDP_ON_CPU: the ranks train as DDP, each holding the whole model
        sharded_by = None
    if launched_world_size() <= 1:
        return Processes(sharded_by=sharded_by)
    from accelerate import PartialState

    state = PartialState(cpu=not _cuda(), timeout=collective_timeout())
    atexit.unregister(_leave_process_group)  # once, however often this is called
    atexit.register(_leave_process_group)
    return Processes(state.process_index, state.num_processes, state.local_process_index, sharded_by)


def _leave_process_group() -> None:
    """Leave the process group at exit: a gloo rank exiting in it after a peer has gone aborts the whole job."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def barrier(processes: Processes) -> None:
    """Every rank waits here until all have arrived (nothing to do for one process)."""
    if processes.many:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def broadcast(value: T, processes: Processes) -> T:
    """The main process's `value`, on every rank (any picklable object)."""
    if not processes.many:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value if processes.is_main else None]
    broadcast_object_list(box, from_process=0)
    return box[0]


def gather(value: T, processes: Processes) -> list[T]:
    """Every rank's `value`, in rank order, on every rank."""
    if not processes.many:
        return [value]
    from accelerate.utils import gather_object

    return gather_object([value])  # accelerate flattens the per-rank lists: one value per rank


def on_main(work: Callable[[], T], processes: Processes) -> T:
    """`work()` done by the main process alone; every rank gets its result, or raises its error."""
    result, error = None, None
    if processes.is_main:
        try:
            result = work()
        except Exception as err:  # handed to every rank, raised by each below
            error = err
    result, error = broadcast((result, error), processes)
    if error is not None:
        raise error
    return result
