"""Per-subset validation metrics from graded completions: plain arithmetic, no model."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from core.checks import is_int

# The columns of validation.jsonl that the report and other tools read.
METRIC_COLUMNS = (
    "accuracy", "lenient_accuracy", "person_accuracy", "format_rate", "answer_rate", "mean_tokens", "median_tokens",
    "p90_tokens", "truncation_rate", "mean_tokens_correct", "mean_tokens_wrong", "reasoning_agrees_rate",
    "reasoning_settles_nobody", "correct_but_disagrees", "invented_name_rate", "n", "puzzles", "with_reasoning",
    "with_settling_reasoning",
)
# Shares of completions (0..1), each shown with a 95% interval over the trials it counts (`trials`).
RATES = ("accuracy", "lenient_accuracy", "person_accuracy", "format_rate", "answer_rate", "truncation_rate",
         "reasoning_agrees_rate", "reasoning_settles_nobody", "correct_but_disagrees", "invented_name_rate",
         "pass_at_k")


@dataclass(frozen=True)
class Scored:
    """One graded completion: the facts the metrics need."""

    puzzle: str  # puzzle id (several samples may share one)
    correct: bool
    n_right: int  # people whose role was named correctly
    n_people: int  # 0 for a task without people (GSM8K, reasoning-gym): no person accuracy
    format_ok: bool
    answered: bool
    tokens: int
    truncated: bool
    has_reasoning: bool = False  # a non-empty closed <think> block (`curriculum.tasks.kk.grading.reasoning`)
    reasoning_agrees: bool = False  # ... that settles someone, its last claim about each matching the answer
    invented: bool = False  # names a person not in the puzzle (reasoning or answer)
    lenient_correct: bool = False  # right under the lenient reading of an untagged answer (grading/lenient.py)
    reasoning_settles: bool = False  # ... whose reasoning settles at least one person


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
    with at least one correct sample. `lenient_accuracy` reads an untagged answer's final
    conclusion (`curriculum.tasks.kk.grading.lenient`); `accuracy` (strict) stays the headline. Reasoning:
    `reasoning_agrees_rate` is over the completions whose reasoning settles at least one person (None
    when none does), `reasoning_settles_nobody` over those with a reasoning block (None when none has
    one); `correct_but_disagrees` (right answers whose reasoning settles someone otherwise) and
    `invented_name_rate` are over every completion, like accuracy.

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
    people = any(s.n_people for s in scored)  # K&K: the reasoning and name checks; none for a one-answer task
    return {
        "accuracy": _mean([float(s.correct) for s in scored]),
        "lenient_accuracy": _mean([float(s.lenient_correct) for s in scored]),
        "person_accuracy": _mean([s.n_right / s.n_people for s in scored if s.n_people]),
        "format_rate": _mean([float(s.format_ok) for s in scored]),
        "answer_rate": _mean([float(s.answered) for s in scored]),
        "mean_tokens": _mean(tokens),
        "median_tokens": float(statistics.median(tokens)),
        "p90_tokens": float(p90(tokens)),
        "truncation_rate": _mean([float(s.truncated) for s in scored]),
        "mean_tokens_correct": _mean([s.tokens for s in scored if s.correct]),
        "mean_tokens_wrong": _mean([s.tokens for s in scored if not s.correct]),
        "reasoning_agrees_rate": _mean([float(s.reasoning_agrees) for s in scored if s.reasoning_settles]),
        "reasoning_settles_nobody": _mean([float(not s.reasoning_settles) for s in scored if s.has_reasoning]),
        "correct_but_disagrees": _mean([float(s.correct and s.reasoning_settles and not s.reasoning_agrees)
                                        for s in scored if people]),
        "invented_name_rate": _mean([float(s.invented) for s in scored if people]),
        "n": len(scored),
        "puzzles": len(by_puzzle),
        "with_reasoning": sum(s.has_reasoning for s in scored),
        "with_settling_reasoning": sum(s.reasoning_settles for s in scored),
        "pass_at_k": _mean([float(v) for v in by_puzzle.values()]),
    }


def trials(row: dict, key: str) -> int | None:
    """The independent trials behind rate `key` of a validation row: the n its interval is drawn over.

    Puzzles, not completions: several samples of one puzzle are not independent, so counting them
    would narrow the interval falsely (with one sample a puzzle, the two are equal). The reasoning
    rates count only completions with reasoning (agreement: only those whose reasoning settles someone),
    in the same puzzle units. None: a row written before these counts were recorded (a row from before
    `with_settling_reasoning` counted agreement over every completion with reasoning).

    >>> row = {"n": 8, "puzzles": 4, "with_reasoning": 6, "with_settling_reasoning": 2}
    >>> trials(row, "accuracy"), trials(row, "reasoning_agrees_rate"), trials(row, "reasoning_settles_nobody")
    (4, 1, 3)
    >>> trials({"n": 5}, "accuracy"), trials({"n": 5}, "reasoning_agrees_rate") is None
    (5, True)
    """
    n = row.get("n")
    puzzles = row.get("puzzles") or n
    if not is_int(puzzles) or puzzles <= 0:
        return None
    if key not in REASONING_TRIALS:
        return puzzles
    counted = row.get(REASONING_TRIALS[key], row.get("with_reasoning"))
    if not isinstance(counted, int) or not isinstance(n, int) or n <= 0:
        return None
    return round(counted * puzzles / n)


# The completions a reasoning rate counts: the count column of a validation row.
REASONING_TRIALS = {"reasoning_agrees_rate": "with_settling_reasoning", "reasoning_settles_nobody": "with_reasoning"}
