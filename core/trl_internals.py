"""Every private member of TRL 1.16 (and of transformers' Trainer) the project reads or writes, one function each.

Nothing else in the product touches an underscore name of a trainer, its vLLM generation or its model's config:
what TRL does not offer publicly is reached here, so that a TRL upgrade that moves a member breaks one module,
and tests/config/test_trl_internals.py, which checks each function against the installed TRL by the member's name.
It lives below train/ and eval/ because both need it (the stage kinds; in-stage validation on the trainer's
engine). TRL is imported inside the one function that needs its classes: importing TRL takes seconds.
"""

from __future__ import annotations

from collections.abc import Mapping

# The columns of GRPOTrainer's `_logs` that rollout sampling reads (TRL 1.16 grpo_trainer.py `__init__`)
LOGGED_BATCH_KEYS = ("prompt", "completion", "rewards", "advantages")


def load_checkpoint_weights(trainer, checkpoint: str) -> None:
    """Load a trainer checkpoint's model weights into `trainer.model` without training.

    transformers' `Trainer._load_from_checkpoint(resume_from_checkpoint)`: what `train(resume_from_checkpoint=)`
    calls first. A stage killed after its last step is published from its checkpoint as it is: `train()` would
    run a step past `max_steps`, and transformers has no public call that loads a checkpoint's weights alone.
    """
    trainer._load_from_checkpoint(checkpoint)


def logged_batch(trainer) -> Mapping | None:
    """The last generation batch a GRPOTrainer keeps for its `log_completions` table, or None when this TRL
    keeps none in that layout.

    TRL 1.16 `GRPOTrainer._logs`: a dict built once in `__init__` whose deques (prompt, completion, rewards by
    reward function name, advantages; sized to the generation batch) each step's scoring extends in place,
    before the step's log line. A callback never sees completions; rollout sampling reads them from this dict.
    """
    batch = getattr(trainer, "_logs", None)
    if isinstance(batch, Mapping) and all(key in batch for key in LOGGED_BATCH_KEYS):
        return batch
    return None


def mark_weights_loaded(trainer) -> None:
    """Record that the trainer's colocated vLLM engine holds the policy's weights of the current step.

    TRL 1.16 `GRPOTrainer._last_loaded_step`: `_generate_single_turn` pushes the policy's weights into the engine
    when `state.global_step` differs from it, then sets it. In-stage validation pushes them itself before it
    borrows the engine; recording it as TRL does keeps the next rollout from pushing them again.
    """
    trainer._last_loaded_step = trainer.state.global_step


def mark_weights_asleep(generation) -> None:
    """Record that the colocated engine's weights were discarded (`llm.sleep(level=2)`).

    TRL 1.16 `VLLMGeneration._llm_weights_sleeping`: with sleep mode, `VLLMGeneration.generate` pushes the
    weights again before generating when it is set. In-stage validation puts the engine back to sleep after
    borrowing it; without this the next rollout would generate from weights vLLM has freed.
    """
    generation._llm_weights_sleeping = True


def point_reference_at(model, path: str) -> None:
    """Make TRL build a trainer's reference model from the checkpoint at `path` instead of `model`'s own.

    TRL 1.16 builds the reference (`GRPOTrainer.__init__`, beta > 0, no PEFT) from
    `trl.trainer.utils.get_config_model_id(model.config)`, which reads the config's private `_name_or_path`;
    transformers' public `name_or_path` setter writes that member. No argument of GRPOTrainer names the
    reference's checkpoint, so a policy whose reference is another checkpoint is pointed at it here.
    """
    model.config.name_or_path = path


def trl_engine_names() -> dict:
    """The module globals TRL 1.16's `VLLMGeneration._init_vllm` looks `LLM` up in when it starts a colocated
    engine: putting another callable under `LLM` there hands TRL the process's engine instead of a second one.

    `VLLMGeneration` is the class GRPOTrainer builds (trl/trainer/grpo_trainer.py imports it by name), so it is
    read from GRPOTrainer's own globals: whichever module object sys.modules holds now.
    """
    from trl import GRPOTrainer

    return GRPOTrainer.__init__.__globals__["VLLMGeneration"]._init_vllm.__globals__
