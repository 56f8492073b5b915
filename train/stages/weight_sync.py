"""A stage's weight-sync group with a vLLM server (`grpo.vllm_mode=server`), closed when the stage ends.

In server mode TRL 1.16's trainer (`VLLMGeneration._init_vllm`, on the main process only) builds a `VLLMClient`
whose `init_communicator` opens the group its weights reach the server through: a StatelessProcessGroup whose TCP
store listens on `vllm_group_port` in this process, and an NCCL communicator over it. TRL closes it only at exit
(`atexit`), and every stage builds a new trainer in the same process whose client opens the group again on the
same port, so the previous stage's must be closed first. `VLLMClient.close_communicator` drops the store (its
listening socket closes with it) and the communicator. The server needs no call: TRL 1.16's `trl vllm-serve` runs
vLLM's own server, which has no close route, and its weight-transfer engine replaces its side of the group at the
next `/init_weight_transfer_engine`.

Closed at two points, the second a no-op after the first: at the end of training (`on_train_end`: the group is
done with before the final is gathered and published) and at the stage's teardown (`release`, from
train/stages/training.py `run_stage`, whatever happened): on_train_end is never called when training raises (a
divergence stop, a failed reward) or when a resume publishes a checkpoint without training, and a process that
goes on after a failed stage (a sweep's next trial) would find the port taken.
"""

from __future__ import annotations

from transformers import TrainerCallback


class WeightSyncGroup(TrainerCallback):
    """Closes the weight-sync group of a trainer that rolls out through a vLLM server; a trainer without one (no
    vLLM, colocated vLLM, a rank other than the main process) is left alone."""

    def __init__(self):
        self.client = None  # TRL's VLLMClient, once bound to a server-mode trainer on the main process

    def bind(self, trainer) -> None:
        generation = getattr(trainer, "vllm_generation", None)
        if getattr(generation, "mode", None) == "server":
            self.client = getattr(generation, "vllm_client", None)  # TRL builds it on the main process only

    def on_train_end(self, args, state, control, **kwargs):
        self.release()

    def release(self) -> None:
        """Close the group, once."""
        client, self.client = self.client, None
        if client is not None:
            client.close_communicator()
