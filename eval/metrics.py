"""Per-subset validation metrics from graded completions: plain arithmetic, no model."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# The columns of validation.jsonl that the report and other tools read.
METRIC_COLUMNS = (
    "accuracy", "person_accuracy", "format_rate", "answer_rate", "mean_tokens", "median_tokens",
    "p90_tokens", "truncation_rate", "mean_tokens_correct", "mean_tokens_wrong", "reasoning_agrees_rate",
    "correct_but_disagrees", "invented_name_rate", "n",
)


@dataclass(frozen=True)
class Scored:
    """One graded completion: the facts the metrics need."""

    puzzle: str  # puzzle id (several samples may share one)
    correct: bool
    n_right: int  # people whose role was named correctly
    n_people: int
    format_ok: bool
    answered: bool
    tokens: int
    truncated: bool
    has_reasoning: bool = False  # a non-empty closed <think> block (`eval.reasoning`)
    reasoning_agrees: bool = False  # ... whose last claim about each person it settles matches the answer
    invented: bool = False  # names a person not in the puzzle (reasoning or answer)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def p90(values: Sequence[int]) -> float:
    """The 90th percentile, nearest rank (a value that occurred).

    >>> p90(list(range(1, 11)))
    9
    """
    ordered = sorted(values)
    rank = max(1, -(-9 * len(ordered) // 10))  # ceil(0.9 n)
    return ordered[rank - 1]


def subset_metrics(scored: Sequence[Scored]) -> dict:
    """Accuracy, format, answer and length figures for one subset (mean over every sample).

    With several samples per puzzle, `accuracy` is mean@k and `pass_at_k` the share of puzzles
    with at least one correct sample. Reasoning: `reasoning_agrees_rate` is over the completions
    with a reasoning block (None when none has one); `correct_but_disagrees` (right answers whose
    reasoning says otherwise) and `invented_name_rate` are over every completion, like accuracy.

    >>> rows = [Scored("a", True, 2, 2, True, True, 10, False), Scored("b", False, 1, 2, True, True, 30, True)]
    >>> m = subset_metrics(rows)
    >>> m["accuracy"], m["person_accuracy"], m["truncation_rate"], m["mean_tokens_correct"]
    (0.5, 0.75, 0.5, 10.0)
    >>> m["reasoning_agrees_rate"], m["correct_but_disagrees"], m["invented_name_rate"]
    (None, 0.0, 0.0)
    """
    if not scored:
        raise ValueError("subset_metrics: no completions to score")
    tokens = [s.tokens for s in scored]
    by_puzzle: dict[str, bool] = {}
    for s in scored:
        by_puzzle[s.puzzle] = by_puzzle.get(s.puzzle, False) or s.correct
    return {
        "accuracy": _mean([float(s.correct) for s in scored]),
        "person_accuracy": _mean([s.n_right / s.n_people for s in scored]),
        "format_rate": _mean([float(s.format_ok) for s in scored]),
        "answer_rate": _mean([float(s.answered) for s in scored]),
        "mean_tokens": _mean(tokens),
        "median_tokens": float(statistics.median(tokens)),
        "p90_tokens": float(p90(tokens)),
        "truncation_rate": _mean([float(s.truncated) for s in scored]),
        "mean_tokens_correct": _mean([s.tokens for s in scored if s.correct]),
        "mean_tokens_wrong": _mean([s.tokens for s in scored if not s.correct]),
        "reasoning_agrees_rate": _mean([float(s.reasoning_agrees) for s in scored if s.has_reasoning]),
        "correct_but_disagrees": _mean([float(s.correct and s.has_reasoning and not s.reasoning_agrees)
                                        for s in scored]),
        "invented_name_rate": _mean([float(s.invented) for s in scored]),
        "n": len(scored),
        "puzzles": len(by_puzzle),
        "pass_at_k": _mean([float(v) for v in by_puzzle.values()]),
    }
