"""A DeepSpeed stage starts from its checkpoint's exact float32 weights, as every other stage does.

DeepSpeed under bf16 makes its float32 master weights from the module after casting it to bf16
(ZeRO-1/2), and ZeRO-3 loads every parameter into bf16 partitions (`zero.Init` in the config's
dtype): a stage would start from the previous final rounded to 8 bits of mantissa, and each handoff
would erase the updates below bf16's resolution that the stages before had made (GRPO's ~1e-6 of a
weight). `ExactStart` writes the start checkpoint's float32 values into DeepSpeed's master copy once
its engine exists, before the first step (the first step's forward runs on the module's bf16 copy of
them, as mixed precision computes), and checks what it wrote against the checkpoint's fingerprint.
A resume is left alone: DeepSpeed restored the master weights from its own checkpoint.
"""

from __future__ import annotations

from transformers import TrainerCallback

from core.weights import fingerprint, saved_parameters, weights_fingerprint


class ExactStart(TrainerCallback):
    """Set DeepSpeed's master weights from `init_model`'s saved float32 ones when training begins at step 0; a
    trainer without DeepSpeed starts from the module as loaded, and is left alone."""

    def __init__(self, init_model: str):
        self.init_model = init_model
        self.names: list[str] = []
        self.expected: str | None = None  # the checkpoint's fingerprint, once bound to a DeepSpeed trainer

    def bind(self, trainer) -> None:
        if trainer.is_deepspeed_enabled:
            self.names = [name for name, _ in trainer.model.named_parameters()]
            self.expected = weights_fingerprint(saved_parameters(self.init_model, self.names))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.expected is None or state.global_step > 0:
            return
        from deepspeed.utils import safe_set_full_fp32_param

        parameters = dict(model.named_parameters())
        for name, value in saved_parameters(self.init_model, self.names):
            safe_set_full_fp32_param(parameters[name], value)  # every rank: each keeps its own partition of it
        found = fingerprint(model)  # the master weights gathered back
        if found != self.expected:
            raise RuntimeError(f"DeepSpeed's master weights hold {found} after being set from {self.init_model} "
                               f"({self.expected}): the stage would not start from its checkpoint")


def start_fingerprint(trainer) -> str:
    """The fingerprint of the weights a stage starts from (a resume loads its checkpoint into the policy later),
    the same on every rank: under DeepSpeed its checkpoint's, which the trainer's `ExactStart` (bound to it) sets
    as the master weights when training begins; else the module's, as loaded."""
    if not trainer.is_deepspeed_enabled:
        return fingerprint(trainer.model)
    exact = [c for c in trainer.callback_handler.callbacks if isinstance(c, ExactStart) and c.expected is not None]
    if not exact:
        raise RuntimeError("a DeepSpeed stage starts from its checkpoint's float32 weights through ExactStart, and "
                           "its trainer has none bound (train/run/runner.py stage_callbacks)")
    return exact[0].expected
