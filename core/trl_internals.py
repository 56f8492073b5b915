"""Every private member of TRL 1.16 (and transformers' Trainer) the project touches, one function each, so that a
TRL upgrade that moves one breaks this module alone (tests/config/test_trl_internals.py checks each).
"""

from __future__ import annotations

from collections.abc import Mapping

# The columns of GRPOTrainer's `_logs` that rollout sampling reads (TRL 1.16 grpo_trainer.py `__init__`)
LOGGED_BATCH_KEYS = ("prompt", "completion", "rewards", "advantages")


def load_checkpoint_weights(trainer, checkpoint: str) -> None:
    """Load a trainer checkpoint's model weights without training (`train()` would run a step past `max_steps`)."""
    trainer._load_from_checkpoint(checkpoint)


def logged_batch(trainer) -> Mapping | None:
    """The last generation batch a GRPOTrainer keeps for its `log_completions` table (`_logs`), or None."""
    batch = getattr(trainer, "_logs", None)
    if isinstance(batch, Mapping) and all(key in batch for key in LOGGED_BATCH_KEYS):
        return batch
    return None


def mark_weights_loaded(trainer) -> None:
    """Record that the colocated engine holds this step's weights (validation pushed them): not pushed again."""
    trainer._last_loaded_step = trainer.state.global_step


def mark_weights_asleep(generation) -> None:
    """Record that the colocated engine's weights were discarded after validation: the next rollout pushes them."""
    generation._llm_weights_sleeping = True


def point_reference_at(model, path: str) -> None:
    """Make TRL build a trainer's reference model from `path` (it reads the config's private `_name_or_path`)."""
    model.config.name_or_path = path


def trl_engine_names() -> dict:
    """The module globals `VLLMGeneration._init_vllm` looks `LLM` up in (to hand TRL the process's engine)."""
    from trl import GRPOTrainer

    return GRPOTrainer.__init__.__globals__["VLLMGeneration"]._init_vllm.__globals__
