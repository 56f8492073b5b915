"""Training and validation pools, and the rows TRL trains on.

A run's validation pools are fixed by `eval.seed` (identical across runs, sweeps and
`python -m eval`); its training pools never contain a validation puzzle, up to renaming of people.
Rows keep `names` and `solution` as lists: a dict column would be unioned across rows by
`datasets` (every name in every row, as None).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass

from datasets import Dataset
from omegaconf import DictConfig

from core.checks import ConfigError
from curriculum.plan import Stage
from curriculum.prompts import model_prompt
from curriculum.sources import distinct_puzzles, iter_records, load_records, split_disjoint

log = logging.getLogger(__name__)


def validation_pool(cfg: DictConfig, ppl: int) -> list[dict]:
    """The held-out puzzles of one subset, the same for every run: of the first `eval.n` records, those
    distinct up to renaming (a repeat would count one puzzle twice in the accuracy)."""
    data, n = cfg.data, int(cfg.eval.n)
    records = load_records(data.source, ppl, "test", n=n, seed=int(cfg.eval.seed), path=data.path, hub_id=data.hub_id)
    if len(records) < n:
        raise ConfigError(f"eval.n: {n} validation puzzles asked at {ppl}ppl, but data.source={data.source} has "
                          f"only {len(records)} distinct ones; lower eval.n")
    distinct = distinct_puzzles(records)
    if len(distinct) < n:
        log.info("%dppl validation: %d distinct puzzles up to renaming among the %d asked (eval.n)",
                 ppl, len(distinct), n)
    return distinct


def training_pool(cfg: DictConfig, stage: Stage, held_out: Mapping[int, list[dict]]) -> tuple[list[dict], int]:
    """A stage's training puzzles, split over its ppl mix, disjoint from `held_out`; and how many were removed."""
    data, records, removed = cfg.data, [], 0
    for ppl, share in stage.pool_weights.items():  # its own mix plus any replay of earlier ppl
        want = max(1, round(stage.pool * share))
        guard = held_out.get(ppl, [])
        # Ask for enough extra that removing held-out puzzles still leaves `want` (generated data): as many
        # as the validation pool was drawn from (eval.n records, before its repeats were dropped). A file
        # (local, hub) is read only as far as its first `want` puzzles not held out.
        if data.source == "generated":
            pool = load_records(data.source, ppl, "train", n=want + (int(cfg.eval.n) if guard else 0),
                                seed=int(cfg.seed))
        else:
            pool = iter_records(data.source, ppl, "train", seed=int(cfg.seed), path=data.path, hub_id=data.hub_id)
        kept, dropped = split_disjoint(pool, guard, limit=None if data.source == "generated" else want)
        removed += dropped
        if not kept:
            raise ConfigError(f"curriculum.stages[{stage.index - 1}] ({stage.name}): no {ppl}ppl training puzzle "
                              f"left: all {dropped} loaded are among the {len(guard)} held out for validation; "
                              "lower eval.n, or give more training data")
        if len(kept) < want:
            log.warning("stage %s: only %d distinct %dppl training puzzles (asked %d)",
                        stage.name, len(kept), ppl, want)
        records += kept[:want]
    random.Random(int(cfg.seed) + stage.index).shuffle(records)
    return records, removed


@dataclass(frozen=True)
class Pools:
    """A run's puzzles: the held-out ones by ppl, and each stage's training ones (none of them held out)."""

    held_out: dict[int, list[dict]]  # every validated subset and every ppl trained on
    training: dict[str, list[dict]]  # by stage name
    removed: dict[str, int]  # by stage name: how many held-out overlaps its training pool dropped


def draw_pools(cfg: DictConfig, plan: list[Stage]) -> Pools:
    """The held-out pools (`eval.subsets` plus every ppl trained on: their held-out puzzles stay out of
    training too), then each stage's training pool, disjoint from them."""
    ppls = sorted({int(p) for p in cfg.eval.subsets} | {p for stage in plan for p in stage.ppl_weights})
    held_out = {ppl: validation_pool(cfg, ppl) for ppl in ppls}
    training, removed = {}, {}
    for stage in plan:
        training[stage.name], removed[stage.name] = training_pool(cfg, stage, held_out)
        log.info("stage %s: %d training puzzles (%d held-out overlaps removed)",
                 stage.name, len(training[stage.name]), removed[stage.name])
    return Pools(held_out, training, removed)


def to_rows(records: list[dict], prompt_cfg: Mapping, tokenizer, *, chat: bool,
            chat_kwargs: Mapping | None = None) -> Dataset:
    """TRL rows: prompt (rendered text, see `curriculum.prompts`), names (list), solution (list of bools), ppl, id."""
    return Dataset.from_list(
        [
            {
                "prompt": model_prompt(r["quiz"], prompt_cfg, tokenizer, chat=chat, chat_kwargs=chat_kwargs),
                "names": list(r["names"]),
                "solution": [bool(x) for x in r["solution"]],
                "ppl": len(r["names"]),
                "id": f"{len(r['names'])}ppl-{r['index']}",
            }
            for r in records
        ]
    )
