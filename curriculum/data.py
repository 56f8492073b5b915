"""Training and validation pools, and the rows TRL trains on, for any task. The validation pools are fixed by
`eval.seed` (the same across runs, sweeps and `python -m eval`); no training pool holds a validation record."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from datasets import Dataset

from core.checks import ConfigError
from curriculum.plan import Stage
from curriculum.prompts import prompt_text
from curriculum.tasks.base import ALL, Task, TaskRecord, task_row

log = logging.getLogger(__name__)


def training_pool(task: Task, stage: Stage, held_out: Mapping[str, list[TaskRecord]], *, seed: int,
                  spare: int) -> tuple[list[TaskRecord], int]:
    """A stage's training records over its level mix, disjoint from `held_out`, and how many were removed."""
    records, removed = [], 0
    for level, share in stage.pool_weights.items():  # its own mix plus any replay of earlier levels
        want = max(1, round(stage.pool * share))
        guard = [r for pool in held_out.values() for r in pool] if level == ALL else held_out.get(level, [])
        kept, dropped = task.training_records(level, want, guard, seed=seed, spare=spare)
        removed += dropped
        if not kept:
            raise ConfigError(f"curriculum.stages[{stage.index - 1}] ({stage.name}): no {level} training puzzle "
                              f"left: all {dropped} loaded are among the {len(guard)} held out for validation; "
                              "lower eval.n, or give more training data")
        if len(kept) < want:
            log.warning("stage %s: only %d distinct %s training records (asked %d)", stage.name, len(kept), level, want)
        records += kept
    random.Random(seed + stage.index).shuffle(records)
    return records, removed


@dataclass(frozen=True)
class Pools:
    """A run's records: the held-out ones by level, and each stage's training ones (none of them held out)."""

    held_out: dict[str, list[TaskRecord]]  # every validated subset and every level trained on
    training: dict[str, list[TaskRecord]]  # by stage name
    removed: dict[str, int]  # by stage name: how many held-out overlaps its training pool dropped


def draw_pools(task: Task, plan: list[Stage], subsets: Sequence[str], *, n: int, eval_seed: int,
               seed: int) -> Pools:
    """The held-out pools (`subsets` and every level trained on), then each stage's training pool, disjoint."""
    trained = [level for stage in plan for level in stage.level_weights if level != ALL]
    levels = [level for level in task.levels if level in {*subsets, *trained}]
    held_out = {level: task.validation_records(level, n, eval_seed) for level in levels}
    for level in levels:
        if len(held_out[level]) < n:
            log.info("%s validation: %d distinct records among the %d asked (eval.n)", level, len(held_out[level]), n)
    training, removed = {}, {}
    for stage in plan:
        training[stage.name], removed[stage.name] = training_pool(task, stage, held_out, seed=seed, spare=n)
        log.info("stage %s: %d training records (%d held-out overlaps removed)",
                 stage.name, len(training[stage.name]), removed[stage.name])
    return Pools(held_out, training, removed)


def to_rows(task: Task, records: list[TaskRecord], prompt_cfg: Mapping, tokenizer, *, chat: bool,
            chat_kwargs: Mapping | None = None) -> Dataset:
    """TRL rows (`task_row`), the prompt as the text GRPO, SFT and validation all feed the model."""
    return Dataset.from_list([task_row(r, prompt_text(task.render(r, prompt_cfg, chat=chat), tokenizer, chat_kwargs))
                              for r in records])


def to_sft_rows(task: Task, records: list[TaskRecord], prompt_cfg: Mapping, tokenizer, *, chat: bool,
                chat_kwargs: Mapping | None = None) -> Dataset:
    """Prompt-completion rows: the prompt as GRPO sees it (a prefill stays there, out of the loss), the reference."""
    return Dataset.from_list([{"prompt": prompt_text(task.render(r, prompt_cfg, chat=chat), tokenizer, chat_kwargs),
                               "completion": task.sft_target(r, prompt_cfg["fmt"])} for r in records])
