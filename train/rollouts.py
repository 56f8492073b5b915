"""Training rollouts, sampled: every `rollouts.every` steps of a GRPO stage (and its first and last), a few
whole groups of the batch the step trained on, with each completion's reward per component, its
weighted reward and its advantage, into `rollouts.jsonl` and the tracker (a table).

A callback never sees completions. TRL's GRPOTrainer keeps the last generation batch for its own
`log_completions` table (prompt, completion, rewards by function, advantages, filled before the step's log
line: `core.trl_internals.logged_batch`); `bind` takes a reference to it, and a layout it does not know turns
sampling off with one warning, never stopping training. Completions of one prompt
are consecutive (TRL repeats each prompt `num_generations` times), so the first `groups` x
`num_generations` rows are whole groups.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from transformers import TrainerCallback

from core.trl_internals import logged_batch
from curriculum.tasks.base import completion_text

log = logging.getLogger(__name__)

def due(step: int, max_steps: int, every: int) -> bool:
    """Sampled at a stage's first and last step and every `every` steps (`every` 0: never).

    >>> [s for s in range(1, 26) if due(s, 25, 10)]
    [1, 10, 20, 25]
    >>> due(1, 5, 0)
    False
    """
    return every > 0 and (step in (1, max_steps) or step % every == 0)


def rollout_rows(batch: Mapping, weights: Mapping[str, float], count: int) -> list[dict]:
    """The first `count` completions of TRL's logged batch as rows: prompt, completion, each reward
    component, the weighted reward and the advantage.

    >>> batch = {"prompt": ["p", "p"], "completion": ["a", "b"], "advantages": [0.7, -0.7],
    ...          "rewards": {"format_reward": [1.0, 0.0], "answer_reward": [1.0, 0.0]}}
    >>> rows = rollout_rows(batch, {"format_reward": 0.5, "answer_reward": 2.0}, 1)
    >>> rows[0]["rewards"], rows[0]["reward"], rows[0]["advantage"]
    ({'format_reward': 1.0, 'answer_reward': 1.0}, 2.5, 0.7)
    """
    prompts, completions, advantages = list(batch["prompt"]), list(batch["completion"]), list(batch["advantages"])
    rewards = {name: list(values) for name, values in batch["rewards"].items()}
    rows = []
    for i in range(min(count, len(completions))):
        parts = {name: values[i] for name, values in rewards.items() if i < len(values)}
        total = sum(weights.get(name, 1.0) * value for name, value in parts.items() if value is not None)
        rows.append({"completion_index": i, "prompt": completion_text(prompts[i]),
                     "completion": completion_text(completions[i]), "rewards": parts,
                     "reward": round(total, 6), "advantage": advantages[i] if i < len(advantages) else None})
    return rows


class RolloutSampler(TrainerCallback):
    """Writes sampled rollouts of a GRPO stage to `writer` and the tracker (`rollouts` table)."""

    def __init__(self, writer, tracker, *, every: int, groups: int, stage_index: int, stage_name: str,
                 step_offset: int):
        self.writer, self.tracker = writer, tracker
        self.every, self.groups = every, groups
        self.tags = {"stage": stage_index, "stage_name": stage_name}
        self.step_offset = step_offset
        self.batch: Mapping | None = None
        self.weights: dict[str, float] = {}
        self.group_size = 1

    def bind(self, trainer) -> None:
        batch = logged_batch(trainer)
        if batch is None:
            log.warning("rollouts: this TRL version keeps no log of the last batch as TRL 1.16 does; "
                        "training rollouts are not sampled")
            return
        self.batch = batch
        self.group_size = int(trainer.num_generations)
        self.weights = dict(zip(trainer.reward_func_names, trainer.reward_weights.tolist(), strict=True))

    def on_log(self, args, state, control, logs=None, **kwargs):
        step = state.global_step
        if self.batch is None or not logs or "train_runtime" in logs or not due(step, state.max_steps, self.every):
            return
        tags = {**self.tags, "stage_step": step, "global_step": self.step_offset + step}
        rows = [{**tags, **row} for row in rollout_rows(self.batch, self.weights, self.groups * self.group_size)]
        self.writer.write(rows)
        self.tracker.table("rollouts/samples", [table_row(row) for row in rows], step=tags["global_step"])


def table_row(row: Mapping) -> dict:
    """A sampled rollout as the tracker's table shows it: one column per reward component, as TRL's own
    `log_completions` table has one per reward function, not one column of JSON (a component named like a row key
    keeps its `rewards/` prefix).

    >>> table_row({"prompt": "p", "completion": "c", "rewards": {"format_reward": 1.0, "reward": 0.2}, "reward": 0.7})
    {'prompt': 'p', 'completion': 'c', 'format_reward': 1.0, 'rewards/reward': 0.2, 'reward': 0.7}
    """
    out: dict = {}
    for key, value in row.items():
        if key == "rewards" and isinstance(value, Mapping):
            out.update({(f"rewards/{name}" if name in row else name): part for name, part in value.items()})
        else:
            out[key] = value
    return out
