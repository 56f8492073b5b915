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

from datasets import Dataset
from omegaconf import DictConfig

from core.checks import ConfigError
from curriculum.plan import Stage
from curriculum.prompts import model_prompt
from curriculum.sources import load_records, split_disjoint

log = logging.getLogger(__name__)


def validation_pool(cfg: DictConfig, ppl: int) -> list[dict]:
    """The held-out puzzles of one subset: `eval.n` records, the same for every run."""
    data, n = cfg.data, int(cfg.eval.n)
    records = load_records(data.source, ppl, "test", n=n, seed=int(cfg.eval.seed), path=data.path, hub_id=data.hub_id)
    if len(records) < n:
        raise ConfigError(f"eval.n: {n} validation puzzles asked at {ppl}ppl, but data.source={data.source} has "
                          f"only {len(records)} distinct ones; lower eval.n")
    return records


def training_pool(cfg: DictConfig, stage: Stage, held_out: Mapping[int, list[dict]]) -> tuple[list[dict], int]:
    """A stage's training puzzles, split over its ppl mix, disjoint from `held_out`; and how many were removed."""
    data, records, removed = cfg.data, [], 0
    for ppl, share in stage.pool_weights.items():  # its own mix plus any replay of earlier ppl
        want = max(1, round(stage.pool * share))
        guard = held_out.get(ppl, [])
        # Ask for enough extra that removing held-out puzzles still leaves `want` (generated data).
        n = want + len(guard) if data.source == "generated" else None
        pool = load_records(data.source, ppl, "train", n=n, seed=int(cfg.seed), path=data.path, hub_id=data.hub_id)
        kept, dropped = split_disjoint(pool, guard)
        removed += dropped
        if not kept:
            raise ConfigError(f"curriculum.stages[{stage.index - 1}] ({stage.name}): no {ppl}ppl training puzzle "
                              f"left: all {len(pool)} loaded are among the {len(guard)} held out for validation; "
                              "lower eval.n, or give more training data")
        if len(kept) < want:
            log.warning("stage %s: only %d distinct %dppl training puzzles (asked %d)",
                        stage.name, len(kept), ppl, want)
        records += kept[:want]
    random.Random(int(cfg.seed) + stage.index).shuffle(records)
    return records, removed


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
