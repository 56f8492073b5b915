"""Every private member of TRL 1.16 (and of transformers' Trainer) the project reads or writes, one function each,
so that a TRL upgrade that moves one breaks this module alone (tests/config/test_trl_internals.py checks each
against the installed TRL). Below train/ and eval/, which both need it; TRL (seconds to import) is imported only
where its classes are needed.
"""

from __future__ import annotations

from collections.abc import Mapping

# The columns of GRPOTrainer's `_logs` that rollout sampling reads (TRL 1.16 grpo_trainer.py `__init__`)
LOGGED_BATCH_KEYS = ("prompt", "completion", "rewards", "advantages")


def load_checkpoint_weights(trainer, checkpoint: str) -> None:
    """Load a trainer checkpoint's model weights into `trainer.model` without training (transformers'
    `Trainer._load_from_checkpoint`): a stage killed after its last step is published from its checkpoint, where
    `train()` would run a step past `max_steps`."""
    trainer._load_from_checkpoint(checkpoint)


def logged_batch(trainer) -> Mapping | None:
    """The last generation batch a GRPOTrainer keeps for its `log_completions` table (`GRPOTrainer._logs`, deques
    each step's scoring extends before its log line), or None when this TRL keeps none in that layout. A callback
    never sees completions; rollout sampling reads them here."""
    batch = getattr(trainer, "_logs", None)
    if isinstance(batch, Mapping) and all(key in batch for key in LOGGED_BATCH_KEYS):
        return batch
    return None


def mark_weights_loaded(trainer) -> None:
    """Record that the trainer's colocated vLLM engine holds the current step's policy weights
    (`GRPOTrainer._last_loaded_step`), which in-stage validation pushed itself: the next rollout does not again."""
    trainer._last_loaded_step = trainer.state.global_step


def mark_weights_asleep(generation) -> None:
    """Record that the colocated engine's weights were discarded (`llm.sleep(level=2)`) after in-stage validation
    (`VLLMGeneration._llm_weights_sleeping`): the next rollout pushes them again, never generating from freed ones."""
    generation._llm_weights_sleeping = True


def point_reference_at(model, path: str) -> None:
    """Make TRL build a trainer's reference model from the checkpoint at `path` instead of `model`'s own: TRL reads
    the config's private `_name_or_path` (`get_config_model_id`), which the public `name_or_path` setter writes, and
    no argument of GRPOTrainer names the reference's checkpoint."""
    model.config.name_or_path = path


def trl_engine_names() -> dict:
    """The module globals `VLLMGeneration._init_vllm` looks `LLM` up in when it starts a colocated engine (another
    callable under `LLM` hands TRL the process's engine), read through GRPOTrainer's own globals: whichever module
    object sys.modules holds now."""
    from trl import GRPOTrainer

    return GRPOTrainer.__init__.__globals__["VLLMGeneration"]._init_vllm.__globals__
