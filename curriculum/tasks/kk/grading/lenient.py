"""Lenient accuracy: what an answer without tags concludes. Reported beside strict accuracy, never a reward.

Instruct models often answer in plain prose, so an off-the-shelf baseline reads 0 under the strict
grader (no <answer> block, no answer). The lenient reading is the strict verdict whenever the
completion has a closed <answer> block; otherwise it reads the final conclusion: the shortest tail of
the text (after the last </think>, if any; tags dropped), grown a line at a time from the end, up to
`MAX_LINES`, that decides every person. Each tail is read by the strict grader's own block parser
(`answer_parse.parse_answer`, on `claims`, both in this package), with its refusals: a hedge, a person given both
roles, a hedge that voids the text, a person not in the puzzle. The first tail that refuses ends the
reading as wrong; assumptions ("Assume Zoey is a knight") are never conclusions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from curriculum.tasks.kk.grading.answer_parse import parse_answer
from curriculum.tasks.kk.grading.grader import Grade

MAX_LINES = 20  # a conclusion is short; a tail longer than this is reasoning, not a conclusion
_TAG = re.compile(r"</?(?:think|answer)>")


@dataclass(frozen=True)
class Lenient:
    """The lenient verdict: right, the assignment it read (name -> role or None), and why not."""

    correct: bool
    assignment: dict[str, bool | None]
    reason: str = ""


def conclusion_text(text: str) -> str:
    """The text a conclusion is read from: after the last </think> (the reasoning is not the answer), tags dropped.

    >>> conclusion_text("<think>Zoey is a knight.</think>\\nSo: <answer>Zoey is a knave")
    'So: \\nZoey is a knave'
    """
    after = text.rsplit("</think>", 1)[-1]
    return _TAG.sub("\n", after).strip()


def lenient_grade(text: str, names: Sequence[str], solution: Sequence[bool], strict: Grade) -> Lenient:
    """The lenient verdict on one completion, given its strict grade.

    >>> from curriculum.tasks.kk.grading.grader import grade
    >>> names, solution = ["Zoey", "Oliver"], [False, True]
    >>> text = "Zoey's claim is false.\\nSo Zoey is a knave and Oliver is a knight."
    >>> lenient_grade(text, names, solution, grade(text, names, solution)).correct
    True
    """
    if strict.answered:  # a tagged answer is the answer: the lenient reading never overrides it
        return Lenient(strict.correct, dict(strict.assignment), "" if strict.correct else "the tagged answer")
    lines = [line for line in conclusion_text(text).splitlines() if line.strip()]
    for k in range(1, min(len(lines), MAX_LINES) + 1):
        parsed = parse_answer("\n".join(lines[-k:]), names)
        refused = parsed.invented or any(not reason.endswith(" missing") for reason in parsed.reasons)
        if refused:
            return Lenient(False, parsed.assignment, "; ".join(parsed.reasons))
        if all(role is not None for role in parsed.assignment.values()):
            right = all(parsed.assignment[n] is bool(s) for n, s in zip(names, solution, strict=True))
            return Lenient(right, parsed.assignment, "" if right else "the conclusion is wrong")
    return Lenient(False, dict.fromkeys(names), f"no conclusion in the last {MAX_LINES} lines decides everyone")
