"""Per-subset validation metrics from graded samples (every task's `METRIC_COLUMNS`): plain arithmetic, no model.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from core.checks import is_int
from core.stats import rounded_mean

# The columns of validation.jsonl that every task's rows hold and the report and other tools read.
METRIC_COLUMNS = ("accuracy", "format_rate", "answer_rate", "mean_tokens", "median_tokens", "p90_tokens",
                  "truncation_rate", "mean_tokens_correct", "mean_tokens_wrong", "n", "puzzles")
# Every task's shares of completions (0..1), each shown with a 95% interval over the trials it counts (`trials`).
RATES = ("accuracy", "format_rate", "answer_rate", "truncation_rate", "pass_at_k")


def subset_metrics(samples: Sequence[Mapping[str, Any]]) -> dict:
    """Every task's metrics of one subset, means over its graded samples; with several samples a record `accuracy`
    is mean@k and `pass_at_k` the share of records (`puzzles`) with a correct one. p90 is the nearest rank.

    >>> rows = [{"id": "a", "correct": True, "format_ok": True, "answered": True, "tokens": 10, "truncated": False},
    ...         {"id": "b", "correct": False, "format_ok": True, "answered": True, "tokens": 30, "truncated": True}]
    >>> m = subset_metrics(rows)
    >>> m["accuracy"], m["truncation_rate"], m["mean_tokens_correct"], m["puzzles"], m["p90_tokens"]
    (0.5, 0.5, 10.0, 2, 30.0)
    """
    if not samples:
        raise ValueError("subset_metrics: no completions to score")
    tokens = sorted(s["tokens"] for s in samples)
    by_record: dict[str, bool] = {}
    for s in samples:
        by_record[s["id"]] = by_record.get(s["id"], False) or bool(s["correct"])
    return {
        "accuracy": rounded_mean(float(s["correct"]) for s in samples),
        "format_rate": rounded_mean(float(s["format_ok"]) for s in samples),
        "answer_rate": rounded_mean(float(s["answered"]) for s in samples),
        "mean_tokens": rounded_mean(tokens),
        "median_tokens": float(statistics.median(tokens)),
        "p90_tokens": float(tokens[max(1, -(-9 * len(tokens) // 10)) - 1]),  # rank ceil(0.9 n): a value that occurred
        "truncation_rate": rounded_mean(float(s["truncated"]) for s in samples),
        "mean_tokens_correct": rounded_mean(s["tokens"] for s in samples if s["correct"]),
        "mean_tokens_wrong": rounded_mean(s["tokens"] for s in samples if not s["correct"]),
        "n": len(samples),
        "puzzles": len(by_record),
        "pass_at_k": rounded_mean(float(v) for v in by_record.values()),
    }


def trials(row: Mapping, key: str, counted: Sequence[str] = ()) -> int | None:
    """The independent trials behind rate `key` of a validation row: records, not completions; a rate over only
    some completions counts those (`counted`: the first present column), in records. None without the counts.

    >>> row = {"n": 8, "puzzles": 4, "with_reasoning": 6, "with_settling_reasoning": 2}
    >>> trials(row, "accuracy"), trials(row, "agrees", ("with_settling_reasoning", "with_reasoning"))
    (4, 1)
    >>> trials({"n": 5}, "accuracy"), trials({"n": 5}, "agrees", ("with_reasoning",)) is None
    (5, True)
    """
    n = row.get("n")
    records = row.get("puzzles") or n
    if not is_int(records) or records <= 0:
        return None
    if not counted:
        return records
    count = next((row[column] for column in counted if column in row), None)
    if not is_int(count) or not is_int(n) or n <= 0:
        return None
    return round(count * records / n)
